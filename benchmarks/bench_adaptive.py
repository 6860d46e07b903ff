"""Adaptive studies (ablate.studies.stages) vs the full grid, on synthetic studies with known truth.

Each study: 3 variants x 2 seeds of tests/synthetic.py curves (realistic eval noise and drift),
ceilings A drawn 0.5-0.75, 100 evaluations to the final budget. The stage rule is exactly
ablate.studies.stages.decide on fits of the curves cut at each stage budget (0.3 and 0.6 of the final
compute), and survivors continue (stages.scale_winner false: a stage that leaves one variant
ends the study). Compared with the full grid's winner (compare's rank on the full curves) and
the true best; compute = evaluations trained, summed over runs.

The real CPU-proxy measurement (benchmarks/adaptive/*.yaml) is in RESULTS.md with its commands.

    python benchmarks/bench_adaptive.py [--studies 40] [--seed 0]
    python benchmarks/bench_adaptive.py --proxy OUT1 OUT2 ...   # replay on real proxy runs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.analysis.compare import rank_order
from ablate.analysis.fitgroups import fit_groups
from ablate.analysis.sources import Curves
from ablate.studies.stages import decide

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic curves live with the tests
from synthetic import curve, random_truth

STAGES = (0.3, 0.6, 1.0)


def fits(frame: pd.DataFrame, c_max: float):
    cut = frame[frame["compute"] <= c_max + 1e-12]
    return fit_groups(Curves(cut, "synthetic", "compute", "score"), n_boot=400)


def staged(frame: pd.DataFrame, c_final: float) -> tuple[list[str], str | None, float]:
    """The stage rule on a study's curves cut at each stage budget: (survivors, winner, compute
    trained as a share of the full grid's)."""
    variants = list(dict.fromkeys(frame["variant"]))
    active, spent, prev = list(variants), 0.0, 0.0
    for k, s in enumerate(STAGES):
        spent += (s - prev) * len(active)
        prev = s
        if s == 1.0:
            break
        d = decide(fits(frame[frame["variant"].isin(active)], s * c_final), stage=k)
        active = d.kept
        if len(active) == 1:
            break
    if len(active) == 1:
        return active, active[0], spent / len(variants)
    order, _ = rank_order(fits(frame[frame["variant"].isin(active)], prev * c_final))
    return active, (order[0].variant if order else None), spent / len(variants)


def one(rng: np.random.Generator) -> dict:
    truths = {f"v{i}": random_truth(rng) for i in range(3)}
    rows = []
    for name, tr in truths.items():
        for seed in (0, 1):
            c, y = curve(tr, rng, c_max=1.0, n_points=100)
            rows.append(pd.DataFrame({"variant": name, "seed": seed, "compute": c, "score": y}))
    frame = pd.concat(rows, ignore_index=True)
    order, _ = rank_order(fits(frame, 1.0))
    full_winner = order[0].variant if order else None
    active, winner, share = staged(frame, 1.0)
    true_best = max(truths, key=lambda n: truths[n].A)
    return {"same_winner": winner == full_winner, "true_best_kept": true_best in active,
            "compute_fraction": share, "full_correct": full_winner == true_best}


def proxy_frame(dirs: list[Path]) -> pd.DataFrame:
    """Real CPU-proxy runs from benchmarks/bench_proxy_grid.py output dirs (`NAME_s0`, `NAME_s1`
    are two seeds of variant NAME): FLOPs and the eval score at every evaluation."""
    rows = []
    for d in dirs:
        for m in sorted(d.glob("*/run/metrics.jsonl")):
            name = m.parts[-3]
            variant, seed = (name[:-3], int(name[-1])) if name[-3:-1] == "_s" else (name, 0)
            pts = [json.loads(x) for x in m.read_text().splitlines() if x.strip()]
            pts = [r for r in pts if "eval/pass_rate" in r and r["flops"] > 0]
            rows.append(pd.DataFrame({"variant": variant, "seed": seed,
                                      "compute": [r["flops"] for r in pts],
                                      "score": [r["eval/pass_rate"] for r in pts]}))
    return pd.concat(rows, ignore_index=True)


def replay_proxy(dirs: list[Path]) -> dict:
    """The stage rule replayed on finished proxy runs of one study (every variant run to the
    same compute): what an adaptive study would have stopped, and at what cost."""
    frame = proxy_frame(dirs)
    c_final = float(frame.groupby("variant")["compute"].max().min())
    order, _ = rank_order(fits(frame, c_final))
    active, winner, share = staged(frame, c_final)
    return {"variants": int(frame["variant"].nunique()), "full_winner": order[0].variant,
            "staged_winner": winner, "survivors": active, "compute_fraction": round(share, 3),
            "stages": list(STAGES)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--proxy", type=Path, nargs="+",
                    help="replay the stage rule on bench_proxy_grid.py output dirs instead")
    a = ap.parse_args()
    if a.proxy:
        print(json.dumps(replay_proxy(a.proxy), indent=1))
        return
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    res = [one(rng) for _ in range(a.studies)]
    out = {k: float(np.mean([r[k] for r in res])) for k in res[0]}
    out.update(studies=a.studies, stages=list(STAGES), seconds=round(time.time() - t0, 1))
    print(json.dumps(out, indent=1))
    Path(__file__).with_name("results_adaptive.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
