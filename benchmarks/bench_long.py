"""Curves at the size real logs have (issue 13): speed, intervals and binning on 1,000-point
runs, and fits on published runs from other projects.

    python benchmarks/bench_long.py                 # everything (~6-8 min on 2 quiet cores)
    python benchmarks/bench_long.py --only speed    # or: coverage, published

speed      `ablate fit --json` and `ablate compare --json` (the real CLI, a fresh process, 1000-
           sample intervals) on 5 curves x 1,000 points, and `ablate fit --json` on 100 x 1,000;
           wall time including Python start-up. Targets: <= 5 s and <= 60 s on 2 cores.
coverage   95% interval coverage of A / B / C_mid and median A width on 1,000-point synthetic
           runs, fit on every point, with --bin 100 and --bin 50, and thinned to every 10th
           point (the alternative to binning). Two drift settings: the benchmark's (phi 0.9 per
           evaluation) and slow per-step drift (phi 0.99, the same correlation time per unit
           compute as phi 0.9 at 100 evaluations).
published  benchmarks/published/*.csv (sources in SOURCES.md): per curve, default and paper
           method: fit time, R^2, verdict, and a fit on the first half of compute predicting
           the final score (mean of the last 3 evaluations), |error| and whether the 95% band
           covers it.
Runs limited to 2 threads (OMP/OPENBLAS); results go to benchmarks/results_long.json.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "2")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this checkout, not an installed copy
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic curves live with the tests

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import synthetic as sy  # noqa: E402
from ablate.analysis.fit import FitError  # noqa: E402
from ablate.analysis.fitters import fit_sigmoid  # noqa: E402
from ablate.analysis.variant_fits import GroupFit  # noqa: E402


def long_frame(n_curves: int, n_points: int, seed: int, drift_phi: float = 0.9) -> tuple[pd.DataFrame, list]:
    rng = np.random.default_rng(seed)
    rows, truths = [], []
    for i in range(n_curves):
        tr = sy.random_truth(rng, 1.0)
        c, y = sy.curve(tr, rng, c_max=1.0, n_points=n_points, drift_phi=drift_phi)
        truths.append(tr)
        rows.append(pd.DataFrame({"variant": f"v{i:03d}", "compute": c, "score": y}))
    return pd.concat(rows, ignore_index=True), truths


def cli_wall(args: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", "from ablate.cli import main; main()", *args], capture_output=True,
                       text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    got = json.loads(p.stdout)
    return wall, len(got["rows"] if isinstance(got, dict) else got)  # compare: docs/JSON.md


def speed() -> dict:
    out = {"load_avg_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as d:
        f5, f100 = Path(d) / "five.csv", Path(d) / "hundred.csv"
        long_frame(5, 1000, seed=41)[0].to_csv(f5, index=False)
        long_frame(100, 1000, seed=42)[0].to_csv(f100, index=False)
        out["fit_5x1000_s"], _ = cli_wall(["fit", str(f5), "--json"])
        out["compare_5x1000_s"], _ = cli_wall(["compare", str(f5), "--json"])
        out["fit_5x1000_bin100_s"], _ = cli_wall(["fit", str(f5), "--json", "--bin", "100"])
        out["fit_100x1000_s"], n = cli_wall(["fit", str(f100), "--json"])
        out["fit_100x1000_bin100_s"], _ = cli_wall(["fit", str(f100), "--json", "--bin", "100"])
    out["load_avg_after"] = os.getloadavg()[0]
    return out


def coverage(n_curves: int, drift_phi: float, seed: int) -> dict:
    df, truths = long_frame(n_curves, 1000, seed=seed, drift_phi=drift_phi)
    settings = {"all points": {}, "--bin 100": {"bins": 100}, "--bin 50": {"bins": 50},
                "every 10th point": {"thin": 10}}
    res = {}
    for name, kw in settings.items():
        hits = {"A": 0, "B": 0, "C_mid": 0}
        widths, secs = [], 0.0
        for (v, g), tr in zip(df.groupby("variant", sort=True), truths):
            c, y = g["compute"].to_numpy(), g["score"].to_numpy()
            if "thin" in kw:
                c, y = c[::kw["thin"]], y[::kw["thin"]]
            t0 = time.perf_counter()
            f = fit_sigmoid(c, y, bins=kw.get("bins"))
            secs += time.perf_counter() - t0
            widths.append(f.ci["A"][1] - f.ci["A"][0])
            for k in hits:
                hits[k] += f.ci[k][0] <= getattr(tr, k) <= f.ci[k][1]
        res[name] = {"coverage": {k: v / n_curves for k, v in hits.items()},
                     "A_width_median": float(np.median(widths)), "s_per_curve": secs / n_curves}
        print(name, json.dumps(res[name]), flush=True)
    return {"curves": n_curves, "drift_phi": drift_phi, "seed": seed, "settings": res}


def published() -> list[dict]:
    rows = []
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.csv")):
        df = pd.read_csv(path)
        for v, g in df.groupby("variant", sort=False):
            c, y = g["compute"].to_numpy(float), g["score"].to_numpy(float)
            final = float(np.mean(y[np.argsort(c)][-3:]))
            for method in ("default", "paper"):
                row = {"file": path.name, "variant": str(v), "points": int(c.size),
                       "method": method}
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    try:
                        f = fit_sigmoid(c, y, method=method)
                        gf = GroupFit(str(v), f, None, c.size, method)
                        row.update(fit_s=time.perf_counter() - t0, A=f.A, r2=f.r2,
                                   verdict=gf.verdict()[0], n_fit=f.n_points)
                    except FitError as e:
                        row.update(fit_s=time.perf_counter() - t0, error=str(e)[:160])
                    try:
                        h = fit_sigmoid(c, y, method=method, max_compute=c.max() / 2)
                        lo, hi = h.predict_interval(c.max())
                        pred = float(h.predict(c.max()))
                        row.update(half_pred=pred, final=final, half_abs_err=abs(pred - final),
                                   half_band_covers=bool(lo <= final <= hi),
                                   half_verdict=GroupFit(str(v), h, None, c.size, method).verdict()[0])
                    except FitError as e:
                        row.update(half_error=str(e)[:160])
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["speed", "coverage", "published"])
    ap.add_argument("--curves", type=int, default=60, help="synthetic curves per coverage set")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI): "
                    "1 curve's coverage at one drift, no CLI timing, no published fits")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results_long.json"))
    a = ap.parse_args()
    res = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {}
    if a.quick:
        res = {"coverage": [coverage(1, 0.9, seed=43)]}  # coverage() prints each line
        Path(a.out).write_text(json.dumps(res, indent=1))
        print(f"wrote {a.out}")
        return
    if a.only in (None, "speed"):
        res["speed"] = speed()
        print(json.dumps(res["speed"], indent=1), flush=True)
    if a.only in (None, "coverage"):
        res["coverage"] = [coverage(a.curves, 0.9, seed=43), coverage(a.curves, 0.99, seed=44)]
    if a.only in (None, "published"):
        res["published"] = published()
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
