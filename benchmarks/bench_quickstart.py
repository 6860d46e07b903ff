"""Choose the quickstart's eval schedule and seeds on data (issue 35).

Why this works without one sweep per candidate: with `rollout.async_timing: data` (the
proxy's) a run's training does not depend on when or how often it is evaluated (eval reads the
trainer's weights with its own seeds; the pipeline's weight pushes, prompt draws and seeds are
fixed by the data), so the eval points of a run with a sparser schedule are exactly a subset
of those of a run with a denser one: the same step has the same FLOPs and the same pass rate.
One sweep with a dense schedule (`eval.per_decade: 16, eval.every_steps: 25`) and 3 seeds
therefore yields every candidate with a coarser schedule (per_decade dividing 16, every_steps
a multiple of 25 or none) and any subset of the seeds, each fitted exactly as `ablate compare`
fits it (the same analysis pipeline, one shared window).

    ablate sweep /tmp/qsc/c1.yaml --wait --results /tmp/qsc/c1      # the dense sweep
    python benchmarks/bench_quickstart.py /tmp/qsc/c1/quickstart [--check /tmp/qsc/c0/quickstart]
    python benchmarks/bench_quickstart.py STUDY --quick   # the first candidate only (CI)

`--check` compares the points two sweeps of the same training share (a partial sweep at the
quickstart's own schedule, say): equal FLOPs and pass rate at every common step, or it says
where they part. Prints one line per candidate: per variant R^2, A and its 95% interval width,
then the number of eval points per run and whether every target holds (R^2 >= 0.95, width <=
0.06, the answer 1.0 above 0.3).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import pandas as pd

from ablate.analysis.pipeline import Options, analyze_curves
from ablate.analysis.sources import Curves

R2_MIN, WIDTH_MAX = 0.95, 0.06


def runs(study: Path) -> list[tuple[str, int, list[dict]]]:
    """(variant name, seed, metrics rows) of every run of a study results dir."""
    out = []
    for v in json.loads((study / "variants.json").read_text()):
        m = study / v["run_id"] / "metrics.jsonl"
        if m.exists():
            out.append((v["name"], v["seed"], [json.loads(x) for x in m.read_text().splitlines()]))
    return out


def due(step: int, last: int, per_decade: int | None, every: int | None) -> bool:
    """trainer/config_parts/schedule.py EvalConfig.due, plus the first and the last point."""
    if step in (0, last) or (every and step % every == 0):
        return True
    if per_decade is None or step < 1:
        return False
    i = math.ceil(per_decade * math.log10(step - 0.5))
    return round(10 ** (i / per_decade)) == step


def candidate(all_runs, per_decade, every, seeds) -> dict:
    rows = []
    n_points = []
    for name, seed, rs in all_runs:
        if seed not in seeds:
            continue
        last = rs[-1]["step"]
        kept = [r for r in rs if due(r["step"], last, per_decade, every)]
        n_points.append(len(kept))
        rows += [{"variant": name, "seed": seed, "compute": r["flops"],
                  "score": r["eval/pass_rate"]} for r in kept]
    curves = Curves(pd.DataFrame(rows), "quickstart", "flops", "eval/pass_rate")
    a = analyze_curves(curves, Options())
    fits = {g.variant: g.fit for g in a.groups}
    out = {"per_decade": per_decade, "every_steps": every, "seeds": list(seeds),
           "points_per_run": max(n_points), "fits": {}}
    for v, f in fits.items():
        out["fits"][v] = None if f is None else {
            "A": round(f.A, 3), "width": round(f.ci["A"][1] - f.ci["A"][0], 3),
            "r2": round(f.r2, 3), "B": round(f.B, 2)}
    ok = [f for f in out["fits"].values() if f]
    hot = out["fits"].get("rollout.temperature=1.0")
    cold = out["fits"].get("rollout.temperature=0.3")
    out["answer_unchanged"] = bool(hot and cold and hot["A"] - cold["A"] > 0.02)
    out["targets_met"] = (len(ok) == len(fits) and out["answer_unchanged"]
                          and all(f["r2"] >= R2_MIN and f["width"] <= WIDTH_MAX for f in ok))
    return out


def check(a: Path, b: Path) -> str:
    """Do two sweeps of the same training agree at every step both evaluated?"""
    ra = {(n, s): {r["step"]: r for r in rs} for n, s, rs in runs(a)}
    rb = {(n, s): {r["step"]: r for r in rs} for n, s, rs in runs(b)}
    common = 0
    for key in set(ra) & set(rb):
        for step in set(ra[key]) & set(rb[key]):
            x, y = ra[key][step], rb[key][step]
            for col in ("flops", "samples", "tokens", "eval/pass_rate"):
                if x[col] != y[col]:
                    return f"{key} step {step}: {col} {x[col]} vs {y[col]}"
            common += 1
    return f"identical at all {common} common points"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("study", type=Path, help="results dir of the dense sweep")
    ap.add_argument("--check", type=Path, help="another sweep of the same training")
    ap.add_argument("--json", type=Path, help="write every candidate here")
    ap.add_argument("--quick", action="store_true",
                    help="the first candidate only: that the harness runs, in seconds (CI)")
    args = ap.parse_args()
    if args.check:
        print("check:", check(args.study, args.check))
    all_runs = runs(args.study)
    have = sorted({s for _, s, _ in all_runs})
    results = []
    grid = list(itertools.product((4, 8, 16), (None, 100, 50, 25), (2, 3)))
    for per_decade, every, n_seeds in grid[:1] if args.quick else grid:
        if n_seeds > len(have):
            continue
        r = candidate(all_runs, per_decade, every, have[:n_seeds])
        results.append(r)
        fits = "  ".join(f"{v.split('=')[-1]}: " + ("refused" if f is None else
                         f"A {f['A']:.3f} w {f['width']:.3f} R2 {f['r2']:.3f}")
                         for v, f in r["fits"].items())
        print(f"per_decade {per_decade:>2} every {str(every):>4} seeds {n_seeds} "
              f"pts {r['points_per_run']:>2}  {fits}  {'MET' if r['targets_met'] else '-'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
