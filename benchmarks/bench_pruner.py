"""How often the curve-predictive pruner (ablate.studies.pruner) stops the true best trial.

Synthetic studies where the truth is known: each trial is a curve from tests/synthetic.py (random
ScaleRL parameters, per-prompt difficulty, 16 samples per prompt, AR(1) drift), run in order as
Optuna would. At each rung (a fraction of the full compute) the trial's curve so far is fitted
exactly as `ablate tune` does (ablate.studies.tune._fit's settings: default window, 400 draws) and the
pruner's rule (ablate.studies.pruner.rung_stops, the collapse rule included) decides; a trial that is not pruned is fitted on its whole curve and its A lower
bound joins the finished ones. Reported: how often the trial with the highest true A was stopped
(target < 5%), how often a pruned trial was in truth within 0.02 of the best finished trial's A
at that time, and the compute saved.

    python benchmarks/bench_pruner.py [--studies 100] [--trials 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ablate.analysis.fit import FitError
from ablate.analysis.fitters import fit_sigmoid
from ablate.studies.pruner import rung_stops
from ablate.studies.stage_rules import run_level

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic curves live with the tests
from synthetic import curve, random_truth

RUNGS = (0.25, 0.5)


def run_study(rng: np.random.Generator, n_trials: int) -> dict:
    truths = [random_truth(rng) for _ in range(n_trials)]
    best = int(np.argmax([t.A for t in truths]))
    finished_lo: list[float] = []
    finished_A: list[float] = []
    pruned, spent, close_calls = [], 0.0, 0
    for i, tr in enumerate(truths):
        c, y = curve(tr, rng, c_max=1.0, n_points=50)
        stop_at = None
        for r in RUNGS:
            m = c <= r
            try:
                f = fit_sigmoid(c[m], y[m], n_boot=400, random_state=rng)
                ci, fell = f.ci["A"], None
            except (FitError, np.linalg.LinAlgError):  # the collapse rule's evidence instead
                ci, fell = None, run_level(y[m])
            if rung_stops(ci, fell, finished_lo):
                stop_at = r
                break
        if stop_at is not None:
            pruned.append(i)
            spent += stop_at
            if tr.A > max(finished_A) - 0.02:
                close_calls += 1
            continue
        spent += 1.0
        try:
            f = fit_sigmoid(c, y, n_boot=400, random_state=rng)
            finished_lo.append(f.ci["A"][0])
            finished_A.append(tr.A)
        except (FitError, np.linalg.LinAlgError):
            pass
    return {"best_pruned": best in pruned, "n_pruned": len(pruned), "close_calls": close_calls,
            "spent": spent, "n": n_trials}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.quick:
        a.studies = 2
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    res = [run_study(rng, a.trials) for _ in range(a.studies)]
    n_trials = a.studies * a.trials
    out = {
        "studies": a.studies, "trials_per_study": a.trials, "rungs": list(RUNGS),
        "true_best_pruned_rate": sum(r["best_pruned"] for r in res) / a.studies,
        "pruned_fraction": sum(r["n_pruned"] for r in res) / n_trials,
        "pruned_within_0.02_of_best_finished": sum(r["close_calls"] for r in res)
        / max(1, sum(r["n_pruned"] for r in res)),
        "compute_fraction": sum(r["spent"] for r in res) / n_trials,
        "seconds": round(time.time() - t0, 1),
    }
    print(json.dumps(out, indent=1))
    if not a.quick:  # a smoke run leaves the recorded results alone
        Path(__file__).with_name("results_pruner.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
