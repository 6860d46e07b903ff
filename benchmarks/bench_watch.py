"""Watching a run against its frozen forecast (issues 33, 41): false alarms and detection delay.

    python benchmarks/bench_watch.py --runs 8 --quickstart /tmp/qs/results/quickstart
    python benchmarks/bench_watch.py --runs 2     # a quick look

Issue 41 adds: two-phase rises (healthy: a fast first gain, then the slower RL rise: the forecast
must not freeze on the first bend nor call the run "ahead" for good), sags reported by depth
(targets on sags of >= 0.05), the rules of ablate.analysis.watch as `ablate watch` applies them
(the provisional forecast before the ceiling is held, renewals, the sag test), and a finished
quickstart study's own runs (`--quickstart STUDY_DIR`): each run as it is (healthy), and each
with a sag or a collapse added from a known onset.

Protocol, per run (what `ablate watch --follow` would have said, evaluation by evaluation: the
freeze uses only the evaluations up to it and each later evaluation is judged against the band in
force then, so one pass over the finished run gives the live verdicts):
  1. freeze: `watch.scan_freeze` (the first identified fit, and the first one held over 1.5x
     its compute);
  2. for each band level and k, `watch.follow`: the evaluation at which a departure is known.
Healthy runs (no departure exists): a false alarm is a run flagged "departed" anywhere after its
freeze. Collapsing runs: the same healthy generator, then from an onset evaluation (drawn
uniformly between 2 evaluations after the freeze and 10 before the end) the true score falls;
delay = evaluations (and compute) from the onset to the evaluation at which the departure is
known (the k-th below the band); a departure flagged before the onset counts as a false alarm,
none at all as a miss.

Sets (60 evaluations from compute 0 to 1; AR(1) run drift sd 0.006, phi 0.9, as
tests/synthetic.py; evaluation noise of a fixed held-out set of P prompts x S samples):
  healthy  sigmoid (tests/synthetic.random_truth), knee (a late plateau: part exponential
           saturation, tests/test_intervals_coverage.truth_curve), fast (saturates in the first
           1-4% of compute, synthetic.fast_saturating's truth), dip (a transient 0.03 dip after the
           bend that recovers: synthetic.noisy_curve "plateau_dip"; counted as healthy)
  collapse a drop of 0.10-0.30 spread over 1-4 evaluations, then flat at the lower level (entropy
           collapse, a reward hack: the published GRPO run that peaks at 0.26 and ends at 0.18
           lost 30% of its score)
  sag      a steady decline of 0.03-0.10 over the rest of the run (off-policy runs that rise and
           fall back)
Noise levels: P x S = 1319 x 1 (GSM8K test, greedy: the published qwen3 runs' eval), 500 x 4
(tests/test_intervals_coverage), 200 x 4 (a small eval set: AIME/MATH-500-sized).
Published: benchmarks/published/*.csv (healthy by eye; all judged with the defaults).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "2")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import synthetic as sy  # noqa: E402
import test_intervals_coverage as tic  # noqa: E402
from ablate.analysis import watch  # noqa: E402

N_EVALS = 60
NOISES = {"gsm8k_1319x1": (1319, 1), "500x4": (500, 4), "200x4": (200, 4)}
HEALTHY = ("sigmoid", "knee", "fast", "dip", "twophase")
FAILING = ("collapse", "sag")
KS = (2, 3, 4)
LEVELS = (0.95, 0.99, 0.999)


def true_curve(shape: str, rng: np.random.Generator):
    """The mean score on compute [0, 1] of a healthy run."""
    if shape == "knee":
        return tic.truth_curve("knee", rng)
    if shape == "twophase":
        return two_phase(rng)
    if shape == "fast":
        tr = sy.Truth(float(rng.uniform(0.45, 0.8)), float(rng.uniform(0.6, 1.5)),
                      float(rng.uniform(0.01, 0.04)), float(rng.uniform(0.15, 0.35)))
    else:
        tr = sy.random_truth(rng)
    base = lambda c: sy.sigmoid(c, tr.A, tr.B, tr.C_mid, tr.R0)  # noqa: E731
    if shape != "dip":
        return base
    bent = min(max(tr.C_mid * (0.85 / 0.15) ** (1 / tr.B), 0.3), 0.85)
    return lambda c: base(c) - 0.03 * np.clip(1 - np.abs(np.asarray(c) - bent) / 0.03, 0, None)


def two_phase(rng: np.random.Generator):
    """A fast first gain (0.10-0.25 by 1-4% of compute: warm-up, format learning), then the
    slower RL rise (0.15-0.35 more, C_mid at 20-40%): the quickstart's shape."""
    r0, g1, g2 = rng.uniform(0.05, 0.2), rng.uniform(0.10, 0.25), rng.uniform(0.15, 0.35)
    c1, c2 = rng.uniform(0.01, 0.04), rng.uniform(0.2, 0.4)
    b1, b2 = rng.uniform(1.5, 3.0), rng.uniform(1.5, 3.0)
    return lambda c: (sy.sigmoid(c, r0 + g1, b1, c1, r0)
                      + sy.sigmoid(c, g2, b2, c2, 0.0))


def observe(p: np.ndarray, rng: np.random.Generator, noise: str) -> np.ndarray:
    prompts, samples = NOISES[noise]
    drift = sy._ar1(rng, p.size, 0.006, 0.9)
    return sy._fixed_prompts(np.clip(p + drift, 1e-4, 1 - 1e-4), rng, prompts, samples, 1.0)


def failing(p: np.ndarray, shape: str, onset: int, rng: np.random.Generator) -> np.ndarray:
    """The healthy mean curve `p` with a collapse or sag from evaluation `onset` on."""
    out = p.copy()
    m = p.size - onset
    if shape == "collapse":
        depth, width = float(rng.uniform(0.10, 0.30)), int(rng.integers(1, 5))
        ramp = np.minimum(np.arange(1, m + 1) / width, 1.0)
        out[onset:] = p[onset - 1] - depth * ramp  # flat at the lower level after the drop
    else:
        drop = float(rng.uniform(0.03, 0.10))
        out[onset:] = p[onset - 1] - drop * np.arange(1, m + 1) / m
    return np.clip(out, 1e-4, 1 - 1e-4)


def flags(c: np.ndarray, y: np.ndarray, fz=None) -> tuple[dict, int]:
    """({"level/k": index at which a departure is known, or None}, evaluations judged at the
    defaults that were above the band in force)."""
    fz = fz or watch.scan_freeze(c, y)
    out, above = {}, 0
    for level in LEVELS:
        for k in KS:
            got = watch.follow(c, y, fz, k, level, 2.0 * float(c[-1]))
            out[f"{level}/{k}"] = None if got is None else got.flagged
            if got is not None and (level, k) == (watch.LEVEL, watch.K):
                above = sum(p.side == "above" for p in got.points)
    return out, above


def one_run(shape: str, noise: str, rng: np.random.Generator) -> dict:
    c = np.linspace(0.0, 1.0, N_EVALS + 1)
    p = np.asarray(true_curve(shape if shape in HEALTHY else "sigmoid", rng)(c), float)
    state = rng.bit_generator.state
    y = observe(p, rng, noise)
    return judged_run(shape, noise, c, p, y, rng, state)


def judged_run(shape, noise, c, p, y, rng, state=None) -> dict:
    """One run's row: healthy as it is, or with a failure added from a drawn onset (the same
    noise: `state` replays it; None adds the failure to the observed scores `y` instead)."""
    fz = watch.scan_freeze(c, y)
    first = fz.n_first
    row = {"shape": shape, "noise": noise, "freeze": first, "held": fz.n}
    if first is None:
        return row
    if shape in FAILING:
        if first + 2 > c.size - 10:
            return {**row, "freeze_too_late": True}
        onset = int(rng.integers(first + 2, c.size - 10 + 1))
        q = failing(p, shape, onset, rng)
        row["depth"] = float(p[onset - 1] - q[-1]) if shape == "sag" else None
        if state is not None:
            rng.bit_generator.state = state  # the same noise: the prefix up to the onset holds
            y = observe(q, rng, noise)
        else:
            y = np.clip(y + (q - p), 0.0, 1.0)
        row["onset"], row["onset_c"] = onset, float(c[onset])
        fz = None
    row["flag"], row["above"] = flags(c, y, fz)
    row["judged"] = int(c.size - first)
    return row


def summarise(rows: list[dict], step: float) -> dict:
    out = {}
    for level in LEVELS:
        for k in KS:
            key = f"{level}/{k}"
            rs = [r for r in rows if "flag" in r]
            healthy = [r for r in rs if "onset" not in r]
            bad = [r for r in rs if "onset" in r]
            s = {"runs": len(rs)}
            if healthy:
                s["false_alarm"] = float(np.mean([r["flag"][key] is not None for r in healthy]))
            if bad:
                early = [r["flag"][key] is not None and r["flag"][key] < r["onset"] for r in bad]
                d = [r["flag"][key] - r["onset"] for r, e in zip(bad, early)
                     if r["flag"][key] is not None and not e]
                s["early_alarm"] = float(np.mean(early))
                s["missed"] = float(np.mean([r["flag"][key] is None for r in bad]))
                s["within_3"] = float(np.mean([r["flag"][key] is not None and not e and
                                               r["flag"][key] - r["onset"] <= 3
                                               for r, e in zip(bad, early)]))
                s["flagged"] = float(np.mean([r["flag"][key] is not None and not e
                                              for r, e in zip(bad, early)]))
                s["median_delay_evals"] = float(np.median(d)) if d else None
                s["median_delay_compute"] = float(np.median(d)) * step if d else None
            out[key] = s
    return out


def published(limit: Optional[int] = None) -> list[dict]:
    """Each published curve judged at the defaults; `limit`: the first so many only."""
    rows = []
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.csv")):
        for v, g in pd.read_csv(path).groupby("variant", sort=False):
            if limit is not None and len(rows) >= limit:
                return rows
            g = g.sort_values("compute")
            j = watch.judge(str(v), str(v), 0, g["compute"].to_numpy(float),
                            g["score"].to_numpy(float), with_today=False)
            rows.append({"file": path.name, "variant": str(v), "evaluations": j.evaluations,
                         "verdict": j.verdict, "reason": j.reason,
                         "frozen_after": j.forecast.n_points if j.forecast else None})
    return rows


def quickstart(study: Path, rng: np.random.Generator, copies: int) -> list[dict]:
    """A finished quickstart study's own runs (x flops, y eval/pass_rate, as its fit: says):
    each as it is (healthy), and `copies` times each with a sag and with a collapse added to
    its observed scores from a drawn onset (the run's own noise kept)."""
    from ablate.analysis.sources import load

    cur = load(study)
    rows = []
    for (v, seed), g in cur.frame.groupby(["variant", "seed"], sort=False):
        g = g.sort_values("compute")
        c, y = g["compute"].to_numpy(float), g["score"].to_numpy(float)
        tag = f"{v}/seed{seed}"
        rows.append({**judged_run("quickstart", tag, c, y, y, rng), "run": tag})
        for shape in FAILING:
            for _ in range(copies):
                rows.append({**judged_run(shape, tag, c, y, y, rng), "run": tag,
                             "quickstart": True})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=12, help="runs per shape and noise level")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results_watch.json"))
    ap.add_argument("--quickstart", default=None, help="a finished quickstart study dir")
    ap.add_argument("--copies", type=int, default=4, help="failures added per quickstart run")
    a = ap.parse_args()
    if a.quick:  # one run a shape, one noise level, one published curve, the default setting
        global LEVELS, KS, N_EVALS  # and half the evaluations a run: each prefix is a fit
        a.runs, LEVELS, KS, N_EVALS = 1, (watch.LEVEL,), (watch.K,), 30
    res: dict = {"load_avg_before": os.getloadavg()[0], "runs": a.runs, "seed": a.seed}
    t0 = time.perf_counter()
    res["published"] = published(1 if a.quick else None)
    for r in res["published"]:
        print("published", json.dumps(r), flush=True)
    all_rows = []
    shapes = (HEALTHY[0], *FAILING) if a.quick else HEALTHY + FAILING
    for i, shape in enumerate(shapes):
        for j, noise in enumerate(list(NOISES)[:1] if a.quick else NOISES):
            rng = np.random.default_rng([a.seed, i, j])
            rows = [one_run(shape, noise, rng) for _ in range(a.runs)]
            all_rows += rows
            res[f"{shape}/{noise}"] = {
                "no_freeze": sum(r["freeze"] is None for r in rows),
                "freeze_too_late": sum(bool(r.get("freeze_too_late")) for r in rows),
                "median_freeze": float(np.median([r["freeze"] for r in rows
                                                  if r["freeze"] is not None] or [np.nan])),
                "by_setting": summarise(rows, 1.0 / N_EVALS)}
            d = res[f"{shape}/{noise}"]
            print(shape, noise, "no_freeze", d["no_freeze"], "median_freeze", d["median_freeze"],
                  json.dumps(d["by_setting"][f"{watch.LEVEL}/{watch.K}"]), flush=True)
    if a.quickstart:
        qs = quickstart(Path(a.quickstart), np.random.default_rng([a.seed, 99]), a.copies)
        res["quickstart_runs"] = qs
        for r in qs:
            print("quickstart", json.dumps({k: r.get(k) for k in (
                "run", "shape", "freeze", "held", "onset", "depth", "above", "judged")}),
                "flag", r.get("flag", {}).get(f"{watch.LEVEL}/{watch.K}"), flush=True)
        all_rows += [{**r, "shape": r["shape"] if r["shape"] in FAILING else "quickstart"}
                     for r in qs]
    groups = (("healthy", HEALTHY + ("quickstart",)), ("twophase", ("twophase",)),
              ("quickstart", ("quickstart",)), ("collapse", ("collapse",)), ("sag", ("sag",)))
    for group, shapes in groups:
        res[f"all_{group}"] = summarise([r for r in all_rows if r["shape"] in shapes],
                                        1.0 / N_EVALS)
        print("ALL", group, json.dumps(res[f"all_{group}"]), flush=True)
    deep = [r for r in all_rows if r["shape"] == "sag" and (r.get("depth") or 0) >= 0.05]
    res["all_sag_ge_0.05"] = summarise(deep, 1.0 / N_EVALS)
    print("ALL sag>=0.05", json.dumps(res["all_sag_ge_0.05"]), flush=True)
    two = [r for r in all_rows if r["shape"] == "twophase" and "above" in r]
    res["twophase_above_share"] = float(np.mean([r["above"] / max(r["judged"], 1)
                                                 for r in two])) if two else None
    res["seconds"] = time.perf_counter() - t0
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
