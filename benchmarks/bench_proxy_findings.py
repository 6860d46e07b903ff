"""The paper's findings and the known-answer controls, checked on finished CPU-proxy studies.

Reads study result dirs (run them first; commands in benchmarks/RESULTS.md) and prints the
markdown tables recorded there:

    python benchmarks/bench_proxy_findings.py --quickstart results/quickstart \
        --calibration results/calibration --details results/proxy_details

- finding 1 (recipes differ in A): the quickstart's variants, A with 95% intervals;
- finding 2 (aggregation / normalization details move B more than A): each variant of the
  details study against its base, A and B differences next to their intervals;
- finding 3 (a fit on the first half of compute predicts the second): for every variant of
  every study, fit the points up to half the variant's largest compute, predict the score at
  the largest compute, compare with the mean of the last three evaluation points;
- the calibration study's known answers (capped ceiling, slowed learning).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate.analysis.fit import Fit, FitError  # noqa: E402
from ablate.analysis.fitters import fit_sigmoid  # noqa: E402

X, Y = "flops", "eval/pass_rate"


def curves(study: Path) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """variant -> (compute, score, seed) pooled over its runs."""
    out: dict[str, list] = {}
    for v in json.loads((study / "variants.json").read_text()):
        path = study / v["run_id"] / "metrics.jsonl"
        if not path.exists():
            continue
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        acc = out.setdefault(v["name"], [[], [], []])
        for r in rows:
            acc[0].append(r[X]), acc[1].append(r[Y]), acc[2].append(v["seed"])
    return {k: tuple(np.asarray(a) for a in v) for k, v in out.items()}


def fit(c, y, s, **kw) -> Fit | None:
    try:
        return fit_sigmoid(c, y, seeds=s, **kw)
    except FitError as e:
        print(f"  (fit failed: {e})", file=sys.stderr)
        return None


def fmt_ci(v: float, ci) -> str:
    return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def fits_table(study: Path, title: str) -> dict[str, Fit]:
    fits = {}
    print(f"\n#### {title} (`{study}`)\n")
    print("| variant | A [95%] | B [95%] | C_mid [95%] | R^2 | points | window |")
    print("|---|---|---|---|---|---|---|")
    for name, (c, y, s) in curves(study).items():
        f = fit(c, y, s)
        if f is None:
            print(f"| {name} | fit failed | | | | | |")
            continue
        fits[name] = f
        lo, hi = f.ci["C_mid"]
        print(f"| {name} | {fmt_ci(f.A, f.ci['A'])} | {fmt_ci(f.B, f.ci['B'])} | "
              f"{f.C_mid:.3g} [{lo:.3g}, {hi:.3g}] | {f.r2:.3f} | {f.n_points} | "
              f"{f.min_compute:.3g}-{f.window_max():.3g} |")
    return fits


def overlap(a, b) -> bool:
    return not (a[1] < b[0] or b[1] < a[0])


def half_fit(studies: list[Path]) -> None:
    print("\n#### Finding 3: fit on the first half of compute, predict the final score\n")
    print("| study | variant | final (mean of last 3 evals) | predicted [95%] | error | "
          "within 0.02 | band covers |")
    print("|---|---|---|---|---|---|---|")
    errs = []
    for study in studies:
        for name, (c, y, s) in curves(study).items():
            cmax = c.max()
            keep = c <= cmax / 2
            f = fit(c[keep], y[keep], s[keep])
            # The final score: the last three evaluation points of every seed, pooled.
            last = np.concatenate([y[s == k][np.argsort(c[s == k])][-3:] for k in np.unique(s)])
            final = float(last.mean())
            if f is None:
                print(f"| {study.name} | {name} | {final:.3f} | fit failed | | | |")
                continue
            pred = float(f.predict(cmax))
            lo, hi = f.predict_interval(cmax)
            err = pred - final
            errs.append(abs(err))
            print(f"| {study.name} | {name} | {final:.3f} | {pred:.3f} [{lo:.3f}, {hi:.3f}] | "
                  f"{err:+.3f} | {'yes' if abs(err) <= 0.02 else 'no'} | "
                  f"{'yes' if lo <= final <= hi else 'no'} |")
    if errs:
        print(f"\n{sum(e <= 0.02 for e in errs)}/{len(errs)} variants within 0.02; "
              f"median |error| {np.median(errs):.3f}, max {max(errs):.3f}")


def calibration(fits: dict[str, Fit], fraction: float, n_eval: int) -> None:
    base = fits.get("base")
    if base is None:
        print("calibration: base did not fit")
        return
    share = 1 - int(fraction * n_eval) / n_eval
    print("\n#### Known-answer controls\n")
    print("| control | check | measured | pass |")
    print("|---|---|---|---|")
    for name, f in fits.items():
        if name.startswith("task.unanswerable_fraction"):
            want = share * base.A
            print(f"| {name} | A within 0.03 of {share:.2f} x A_base = {want:.3f} | "
                  f"{f.A:.3f} (off {f.A - want:+.3f}) | {abs(f.A - want) <= 0.03} |")
            print(f"| {name} | ranked below base, A intervals apart | "
                  f"{fmt_ci(f.A, f.ci['A'])} vs {fmt_ci(base.A, base.ci['A'])} | "
                  f"{f.A < base.A and not overlap(f.ci['A'], base.ci['A'])} |")
        elif name != "base":
            cm_apart = not overlap(f.ci["C_mid"], base.ci["C_mid"])
            b_apart = not overlap(f.ci["B"], base.ci["B"])
            print(f"| {name} | A within 0.02 of the base's {base.A:.3f} | {f.A:.3f} "
                  f"(off {f.A - base.A:+.3f}) | {abs(f.A - base.A) <= 0.02} |")
            print(f"| {name} | C_mid or B differs (intervals apart) | C_mid {f.C_mid:.3g} vs "
                  f"{base.C_mid:.3g}; B {f.B:.2f} vs {base.B:.2f} | {cm_apart or b_apart} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quickstart", type=Path)
    ap.add_argument("--calibration", type=Path)
    ap.add_argument("--details", type=Path)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--n-eval", type=int, default=256)
    a = ap.parse_args()
    studies = [p for p in (a.quickstart, a.calibration, a.details) if p is not None]
    if a.quickstart:
        fits_table(a.quickstart, "Finding 1: the quickstart's axis")
    if a.details:
        fits_table(a.details, "Finding 2: aggregation / normalization details")
    if a.calibration:
        calibration(fits_table(a.calibration, "Calibration"), a.fraction, a.n_eval)
    half_fit(studies)


if __name__ == "__main__":
    main()
