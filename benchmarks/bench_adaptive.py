"""Adaptive studies (ablate.studies.adaptive) vs the full grid, on synthetic studies with known truth.

Each study: 3 variants x 2 seeds of tests/synthetic.py curves (realistic eval noise and drift),
ceilings A drawn 0.5-0.75, 100 evaluations to the final budget. The stage rule is exactly
ablate.studies.stage_rules.decide on fits of the curves cut at each stage budget (0.3 and 0.6 of the final
compute), and survivors continue (stages.scale_winner false: a stage that leaves one variant
ends the study). Compared with the full grid's winner (compare's rank on the full curves) and
the true best; compute = evaluations trained, summed over runs.

The real CPU-proxy measurement: both studies of benchmarks/adaptive/ swept for real, then
`--sweeps RESULTS` reads them (each study's winner as `ablate compare` ranks it, a variant the
adaptive study stopped left out; FLOPs trained, summed over each study's runs):

    ablate sweep benchmarks/adaptive/full.yaml   --results RESULTS --wait
    ablate sweep benchmarks/adaptive/staged.yaml --results RESULTS --wait
    python benchmarks/bench_adaptive.py --sweeps RESULTS

    python benchmarks/bench_adaptive.py [--studies 40] [--seed 0]
    python benchmarks/bench_adaptive.py --proxy OUT1 OUT2 ...   # replay on real proxy runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.analysis.compare import rank_order
from ablate.analysis.variant_fits import fit_groups
from ablate.analysis.sources import Curves
from ablate.studies.stage_rules import decide, score_levels
from ablate.studydir import read_stages as read_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic curves live with the tests
from synthetic import curve, random_truth

STAGES = (0.3, 0.6, 1.0)


def upto(frame: pd.DataFrame, c_max: float) -> pd.DataFrame:
    """The curves as seen when `c_max` compute has been trained."""
    return frame[frame["compute"] <= c_max + 1e-12]


def fits(seen: pd.DataFrame):
    return fit_groups(Curves(seen, "synthetic", "compute", "score"), n_boot=400)


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
        seen = upto(frame[frame["variant"].isin(active)], s * c_final)
        d = decide(fits(seen), stage=k, levels=score_levels(seen))
        active = d.kept
        if len(active) == 1:
            break
    if len(active) == 1:
        return active, active[0], spent / len(variants)
    order, _ = rank_order(fits(upto(frame[frame["variant"].isin(active)], prev * c_final)))
    return active, (order[0].variant if order else None), spent / len(variants)


def one(rng: np.random.Generator) -> dict:
    truths = {f"v{i}": random_truth(rng) for i in range(3)}
    rows = []
    for name, tr in truths.items():
        for seed in (0, 1):
            c, y = curve(tr, rng, c_max=1.0, n_points=100)
            rows.append(pd.DataFrame({"variant": name, "seed": seed, "compute": c, "score": y}))
    frame = pd.concat(rows, ignore_index=True)
    order, _ = rank_order(fits(upto(frame, 1.0)))
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
    order, _ = rank_order(fits(upto(frame, c_final)))
    active, winner, share = staged(frame, c_final)
    return {"variants": int(frame["variant"].nunique()), "full_winner": order[0].variant,
            "staged_winner": winner, "survivors": active, "compute_fraction": round(share, 3),
            "stages": list(STAGES)}


def _compare(study_dir: Path) -> list[dict]:
    out = subprocess.run(["ablate", "compare", str(study_dir), "--json"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)["rows"]  # the versioned object (docs/JSON.md)


def _flops(study_dir: Path) -> float:
    """FLOPs trained by every run of a study: the last `flops` each run logged."""
    total = 0.0
    for m in study_dir.glob("*/metrics.jsonl"):
        rows = [json.loads(x) for x in m.read_text().splitlines() if x.strip()]
        total += max((r.get("flops", 0.0) for r in rows), default=0.0)
    return total


def sweeps(results: Path) -> dict:
    """The adaptive study against the full grid, both swept for real into RESULTS."""
    full, staged = results / "adaptive_full", results / "adaptive_staged"
    rows_full, rows_staged = _compare(full), _compare(staged)

    def win(rows: list[dict]) -> str:  # the best-ranked variant the study did not stop
        return next(r["variant"] for r in rows if not r.get("stopped"))

    variants = {}
    for r in rows_full:
        st = next(x for x in rows_staged if x["variant"] == r["variant"])
        variants[r["variant"]] = {
            "full_A": r.get("A"), "full_A_ci": r.get("A_ci"),
            "staged_A": st.get("A"), "staged_A_ci": st.get("A_ci"),
            "stopped": st.get("stopped")}
    f_full, f_staged = _flops(full), _flops(staged)
    w_full, w_staged = win(rows_full), win(rows_staged)
    return {"full_winner": w_full, "staged_winner": w_staged,
            "same_winner": w_full == w_staged, "flops_full": f_full,
            "flops_staged": f_staged, "compute_fraction": round(f_staged / f_full, 3),
            "decisions": read_state(staged)["decisions"], "variants": variants}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--proxy", type=Path, nargs="+",
                    help="replay the stage rule on bench_proxy_grid.py output dirs instead")
    ap.add_argument("--sweeps", type=Path, help="RESULTS dir holding adaptive_full and "
                    "adaptive_staged, both swept (benchmarks/adaptive/)")
    a = ap.parse_args()
    if a.quick:
        a.studies = 1
    if a.sweeps:
        print(json.dumps(sweeps(a.sweeps), indent=1))
        return
    if a.proxy:
        print(json.dumps(replay_proxy(a.proxy), indent=1))
        return
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    res = [one(rng) for _ in range(a.studies)]
    out = {k: float(np.mean([r[k] for r in res])) for k in res[0]}
    out.update(studies=a.studies, stages=list(STAGES), seconds=round(time.time() - t0, 1))
    print(json.dumps(out, indent=1))
    if not a.quick:  # a smoke run leaves the recorded results alone
        Path(__file__).with_name("results_adaptive.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
