"""The default fit window (issue 14): shape-based rule vs the old fixed fraction vs every point.

    python benchmarks/bench_window.py            # ~2-3 min on 2 cores
    python benchmarks/bench_window.py --quick

Curve sets (tests/synthetic.py; benchmark seeds 31-34, the rule's constant was chosen on 0 and 7):
  synthetic      the curves benchmark's curves: the sigmoid from compute 0 plus 1,000-prompt x
                 16-sample evaluation noise and AR(1) drift (nothing should be skipped)
  fast           warm-started runs rising from their first evaluation, C_mid at 1-4% of the run
                 (the CPU proxy, instruct models on GSM8K-style tasks)
  early_phase    paper-shaped runs: the sigmoid plus a fast early jump fading by ~10% of the run
  quickstart     the CPU proxy's real seed-0 curve (benchmarks/RESULTS.md), one curve
Rules: auto (ablate.analysis.window, the default), old (skip compute < 10% of the largest: a
fixed fraction), all (every point with compute > 0). Per set and rule: fits refused, |A - true
A| median / 90th pct, median R^2, share of curves with points skipped, the 95% interval's
coverage of the true A (synthetic only; bootstrap), and the first-half fit's error predicting
the true final score.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "2")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic curves live with the tests

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import synthetic as sy  # noqa: E402
from ablate.analysis.fit import FitError, sigmoid  # noqa: E402
from ablate.analysis.fitters import fit_sigmoid  # noqa: E402

QUICKSTART_SEED0 = np.array(
    "0.323 0.359 0.382 0.404 0.415 0.429 0.438 0.438 0.451 0.451 0.449 0.454 0.450 0.455 0.460 "
    "0.460 0.462 0.461 0.472 0.479 0.475 0.485 0.486 0.473 0.480 0.489".split(), float)
RULES = {"auto": lambda c: None, "old": lambda c: 0.1 * c.max(), "all": lambda c: 1e-300}


def sets(n: int) -> dict[str, list]:
    out = {}
    rng = np.random.default_rng(31)
    out["synthetic"] = [(tr, *sy.curve(tr, rng, c_max=0.05, n_points=100))
                        for tr in (sy.random_truth(rng, 0.05) for _ in range(n))]
    rng = np.random.default_rng(32)
    out["fast"] = [sy.fast_saturating(rng, n_points=int(rng.integers(25, 100))) for _ in range(n)]
    rng = np.random.default_rng(33)
    out["early_phase"] = [sy.early_phase(rng) for _ in range(n)]
    return out


def measure(curves, rule, intervals: bool) -> dict:
    err, r2, skipped, cover, half = [], [], [], [], []
    refused = 0
    for tr, c, y in curves:
        try:
            f = fit_sigmoid(c, y, min_compute=RULES[rule](c), intervals=intervals, n_boot=300)
        except FitError:
            refused += 1
            continue
        err.append(abs(f.A - tr.A))
        r2.append(f.r2)
        skipped.append(f.skipped)
        if intervals:
            cover.append(f.ci["A"][0] <= tr.A <= f.ci["A"][1])
        h = c <= c.max() / 2
        try:
            fh = fit_sigmoid(c[h], y[h], min_compute=RULES[rule](c[h]), intervals=False)
            half.append(abs(fh.predict(c.max()) - sigmoid(c.max(), tr.A, tr.B, tr.C_mid, tr.R0)))
        except FitError:
            half.append(np.nan)
    e = np.array(err)
    return {"curves": len(curves), "refused": refused,
            "A_abs_err_median": float(np.median(e)), "A_abs_err_p90": float(np.quantile(e, 0.9)),
            "r2_median": float(np.median(r2)), "share_skipping": float(np.mean(np.array(skipped) > 0)),
            "A_coverage": float(np.mean(cover)) if cover else None,
            "half_extrap_err_median": float(np.nanmedian(half)),
            "half_fits_refused": int(np.sum(np.isnan(half)))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="benchmarks/results_window.json")
    a = ap.parse_args()
    res: dict = {}
    for name, curves in sets(5 if a.quick else 100).items():  # --quick: CI's smoke run
        res[name] = {}
        for rule in RULES:
            t0 = time.perf_counter()
            res[name][rule] = measure(curves, rule, intervals=name == "synthetic")
            res[name][rule]["seconds"] = time.perf_counter() - t0
            print(name, rule, json.dumps(res[name][rule]), flush=True)
    c = np.arange(QUICKSTART_SEED0.size) * 10.0
    res["quickstart"] = {}
    for rule in RULES:
        f = fit_sigmoid(c, QUICKSTART_SEED0, min_compute=RULES[rule](c), intervals=False)
        res["quickstart"][rule] = {"A": f.A, "B": f.B, "r2": f.r2, "skipped": f.skipped}
        print("quickstart", rule, json.dumps(res["quickstart"][rule]))
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
