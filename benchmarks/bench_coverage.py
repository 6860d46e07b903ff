"""Extrapolation intervals on curves a sigmoid does not follow (issue 24): old vs new coverage.

    python benchmarks/bench_coverage.py        # ~1 min on 2 cores

Protocol, per curve: fit on the first half of compute (`max_compute = C_max / 2`, the default
window rule inside it), predict the score at C_max, and check whether the 95% interval covers it.
old: the parameter draws' band (`percentile_interval` of the sigmoid at C_max over `Fit.samples`),
what `predict_interval` gave before issue 24; drift_only: plus the run's drift at the target (the
interval's first version; since issue 32 capped at each draw's A, as new is); new:
`fit.predictive_interval` (drift, and half of the draws taking the plateau explanation: nothing
gained past the window's end). All from the same fit.

Sets:
  published  benchmarks/published/*.csv (SOURCES.md), target = mean of the last 3 evaluations;
             published_splits: the same curves fit on their first 30, 40, 50, 60 and 70% of compute
  knee, sag  synthetic misspecified runs (tests/test_intervals_coverage.py: exponential saturation,
             a sigmoid that sags late), target = the run's score at C_max without eval noise
  sigmoid    well-specified synthetic runs, same target
Coherence (issue 32), per fit, at COHERENCE_AT x the window's end: fits_above_A (fits whose
new upper end goes above A's interval's; 0 by construction now) and lower_drop (how far the new
lower end falls below its value at a smaller budget: the run's drift, the one term allowed to).
Synthetic sets use seed 1 here; the method (which has no constant to set) was chosen on seeds 0
and 1 at 60 runs per shape. Nothing was tuned on the published curves.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "2")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import test_intervals_coverage as tic  # noqa: E402
from ablate.analysis.fit import FitError, percentile_interval, predictive_interval, sigmoid  # noqa: E402
from ablate.analysis.fitters import fit_sigmoid  # noqa: E402
from ablate.analysis.intervals import STOP  # noqa: E402

COHERENCE_AT = (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0)  # budgets / the window's end


def half_fit_row(c: np.ndarray, y: np.ndarray, target: float, seed: int,
                 share: float = 0.5) -> dict:
    """One curve: the prediction at the end of a fit on its first `share` of compute, old and
    new interval."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = fit_sigmoid(c, y, max_compute=c.max() * share, random_state=seed)
    except FitError as e:
        return {"refused": str(e)[:120]}
    s = f.samples
    ivs = {"old": percentile_interval(sigmoid(c.max(), s["A"], s["B"], s["C_mid"], s["R0"])),
           "new": predictive_interval(f, c.max())}
    stop = s[STOP].copy()
    s[STOP] = np.zeros_like(stop)  # the same draws without the plateau explanation: drift alone
    ivs["drift_only"] = predictive_interval(f, c.max())
    s[STOP] = stop
    row = {"pred": float(f.predict(c.max())), "target": target, **coherence(f)}
    for name, iv in ivs.items():
        row.update({name: list(iv), f"{name}_covers": bool(iv[0] <= target <= iv[1])})
    return row


def coherence(f) -> dict:
    """Issue 32's checks of the new interval at budgets past the window (COHERENCE_AT x its
    end): how far its upper end goes above A's interval (never > 0 since the draws are capped at
    their A), and how far its lower end falls below what it was at a smaller budget (the run's
    drift may do that; the curve part never falls)."""
    end = f.window_end()
    ivs = np.array([predictive_interval(f, math.exp(end) * m) for m in COHERENCE_AT])
    return {"above_A": float(np.max(ivs[:, 1]) - f.ci["A"][1]),
            "lower_drop": float(np.max(np.maximum.accumulate(ivs[:, 0]) - ivs[:, 0]))}


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "refused" not in r]
    if not ok:
        return {"curves": len(rows), "fits": 0}
    out = {"curves": len(rows), "fits": len(ok),
           "mean_abs_err": float(np.mean([abs(r["pred"] - r["target"]) for r in ok])),
           # the narrowest interval centred on the prediction that covers 95% of the targets
           "needed_width": 2 * float(np.quantile([abs(r["pred"] - r["target"]) for r in ok], 0.95))}
    out["fits_above_A"] = int(sum(r["above_A"] > 0 for r in ok))
    out["lower_drop_mean"] = float(np.mean([r["lower_drop"] for r in ok]))
    out["lower_drop_max"] = float(np.max([r["lower_drop"] for r in ok]))
    for k in ("old", "drift_only", "new"):
        out[f"{k}_coverage"] = float(np.mean([r[f"{k}_covers"] for r in ok]))
        out[f"{k}_mean_width"] = float(np.mean([r[k][1] - r[k][0] for r in ok]))
        # which side misses: the plateau explanation only reaches down
        out[f"{k}_miss_low"] = float(np.mean([r["target"] < r[k][0] for r in ok]))
    return out


def published(shares: tuple[float, ...] = (0.5,)) -> list[dict]:
    """Each published curve, fit on its first `share` of compute for each share."""
    rows = []
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.csv")):
        for v, g in pd.read_csv(path).groupby("variant", sort=False):
            g = g.sort_values("compute")
            c, y = g["compute"].to_numpy(float), g["score"].to_numpy(float)
            rows += [{"file": path.name, "variant": str(v), "share": share,
                      **half_fit_row(c, y, float(np.mean(y[-3:])), 0, share)} for share in shares]
    return rows


def synthetic(shape: str, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(1000 * tic.SHAPES.index(shape) + seed)
    rows = []
    for i in range(n):
        target, c, y = tic.run(shape, rng)
        rows.append(half_fit_row(c, y, target, i))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curves", type=int, default=100, help="synthetic runs per shape")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results_coverage.json"))
    a = ap.parse_args()
    if a.quick:
        a.curves = 2
    res: dict = {"load_avg_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    rows = published()
    res["published"] = {"summary": summary(rows), "rows": rows}
    print("published", json.dumps(res["published"]["summary"]), flush=True)
    # more cases from the same curves: fits on their first 30-70% of compute (not independent:
    # one curve's fits share its noise)
    rows = published((0.3, 0.4, 0.5, 0.6, 0.7))
    res["published_splits"] = {"summary": summary(rows), "rows": rows}
    print("published_splits", json.dumps(res["published_splits"]["summary"]), flush=True)
    for shape in tic.SHAPES:
        rows = synthetic(shape, a.curves, a.seed)
        res[shape] = {"summary": summary(rows)}
        print(shape, json.dumps(res[shape]["summary"]), flush=True)
    res["seconds"] = time.perf_counter() - t0
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
