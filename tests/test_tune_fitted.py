"""`ablate tune` on the fitted curve: predicted A / score at a budget, and the curve pruner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _stage_entry import COLLAPSE_LR, truth_A
from _study_util import ROOT, cli

from ablate.studies.pruner import rung_stops, should_stop

ENTRY = "_stage_entry:synthetic_run"
SPACE = f"""name: tf
base: {ROOT / 'recipes' / 'proxy.yaml'}
overrides:
  engine.threads: 1
budget: {{steps: 60}}
params:
  optim.lr: {{low: 1.0e-4, high: 4.0e-4}}
objective: {{metric: eval/pass_rate, reduce: asymptote, x: gpu_hours}}
prune: {{rungs: [{{steps: 25}}]}}
n_trials: 8
seed: 3
"""


def _run(tmp_path: Path, text: str, *extra: str):
    space = tmp_path / "space.yaml"
    space.write_text(text)
    return cli("tune", str(space), "--results", str(tmp_path / "res"), "--entry", ENTRY, *extra)


@pytest.mark.slow
def test_fitted_objective_and_curve_pruner(tmp_path):
    r = _run(tmp_path, SPACE, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    trials = out["trials"]
    states = [t["state"] for t in trials]
    assert states.count("PRUNED") >= 1 and states.count("COMPLETE") >= 2, states
    finished_lo: list[float] = []
    for t in trials:
        steps = [json.loads(x)["step"] for x in Path(t["run_dir"], "metrics.jsonl").read_text().splitlines()]
        if t["state"] == "COMPLETE":
            lo, hi = t["A_ci"]
            assert lo <= t["value"] <= hi and steps[-1] == 60
            assert abs(t["value"] - truth_A(t["params"]["optim.lr"])) < 0.03
            finished_lo.append(lo)
        else:  # stopped at the rung, and only because a finished trial's A was surely higher
            assert t["pruned_at"] == {"steps": 25} and steps[-1] == 25
            assert truth_A(t["params"]["optim.lr"]) < max(finished_lo)
    done = [t for t in trials if t["state"] == "COMPLETE"]
    best = max(done, key=lambda t: t["params"]["optim.lr"])  # truth: A grows with lr
    assert out["best"]["number"] == best["number"] and out["best"]["A_ci"] == best["A_ci"]
    # Rerun continues: pruned trials count as tried, nothing is trained twice.
    again = json.loads(_run(tmp_path, SPACE, "--json").stdout)
    assert again["trials"] == trials


@pytest.mark.slow
def test_curve_pruner_stops_a_collapsed_trial_whose_curve_cannot_be_fitted(tmp_path):
    # From lr 1e-3 up a trial collapses (_stage_entry: score 0.5 -> 0.03, no fit at any rung);
    # below it, it rises to A = lr * 2000.
    text = (SPACE.replace("optim.lr: {low: 1.0e-4, high: 4.0e-4}",
                          "optim.lr: {low: 2.0e-4, high: 3.0e-3, log: true}")
            .replace("n_trials: 8", "n_trials: 5"))
    out = json.loads(_run(tmp_path, text, "--json").stdout)
    trials = out["trials"]
    after = [t for i, t in enumerate(trials) if t["params"]["optim.lr"] >= COLLAPSE_LR
             and any(u["state"] == "COMPLETE" for u in trials[:i])]
    assert after, [(t["params"], t["state"]) for t in trials]  # the seed puts one after a finish
    for t in after:  # stopped at the rung, not trained to the end and failed there
        steps = [json.loads(x)["step"] for x in Path(t["run_dir"], "metrics.jsonl").read_text().splitlines()]
        assert t["state"] == "PRUNED" and t["pruned_at"] == {"steps": 25} and steps[-1] == 25
    assert out["best"]["params"]["optim.lr"] < COLLAPSE_LR


@pytest.mark.slow
def test_predicted_objective_reports_its_interval(tmp_path):
    text = (SPACE.replace("reduce: asymptote, x: gpu_hours", "reduce: predicted, x: gpu_hours, at: 0.2")
            .replace("prune: {rungs: [{steps: 25}]}\n", "").replace("n_trials: 8", "n_trials: 2"))
    out = json.loads(_run(tmp_path, text, "--json").stdout)
    for t in out["trials"]:
        lo, hi = t["predicted_ci"]
        assert t["state"] == "COMPLETE" and lo <= t["value"] <= hi
        assert t["value"] < truth_A(t["params"]["optim.lr"]) + 0.02


@pytest.mark.parametrize("old, new, msg", [
    ("metric: eval/pass_rate", "metric: eval/pass_rat", "did you mean 'eval/pass_rate'"),
    ("metric: eval/pass_rate, reduce: asymptote", "metric: evl/pass_rate, reduce: last",
     "is not a metrics.jsonl column"),
    ("x: gpu_hours", "x: gpu_hour", "did you mean 'gpu_hours'"),
    ("reduce: asymptote", "reduce: asymptot", "space.yaml:8"),
    ("reduce: asymptote, x: gpu_hours", "reduce: predicted, x: gpu_hours", "needs `at`"),
    ("reduce: asymptote", "reduce: last", "prune compares fitted asymptotes"),
    ("rungs: [{steps: 25}]", "rungs: [{steps: 80}]", "below the final budget"),
])
def test_bad_objective_is_refused_before_any_trial(tmp_path, old, new, msg):
    assert old in SPACE
    r = _run(tmp_path, SPACE.replace(old, new))
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "res").exists()


def test_should_stop_needs_a_finished_trial_whose_lower_bound_is_above():
    assert should_stop(0.5, []) is None
    assert should_stop(0.5, [0.45, 0.49]) is None
    assert should_stop(0.5, [0.45, 0.52]) == 0.52


def test_rung_stops_uses_the_interval_or_else_a_collapse():
    assert rung_stops([0.3, 0.5], None, [0.52]) and not rung_stops([0.3, 0.5], None, [0.45])
    # No fit: a fall of >= 0.05 from its best to below a finished lower bound stops it.
    assert rung_stops(None, [0.60, 0.10], [0.52])
    assert not rung_stops(None, [0.60, 0.57], [0.80])  # within noise of its best: not a collapse
    assert not rung_stops(None, [0.90, 0.60], [0.52])  # fell, but above what the best is sure of
    assert not rung_stops(None, None, [0.52]) and not rung_stops(None, [0.6, 0.1], [])


def test_a_trial_whose_metric_the_fitter_refuses_fails_alone(tmp_path):
    """A score outside [0, 1] is that trial's bad data: it fails (RuntimeError, which optuna
    records as a failed trial and the search goes on), where it used to end `ablate tune`."""
    import optuna

    from ablate.studies.tune import Objective, _fitted_score

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"gpu_hours": 0.1 * i, "eval/pass_rate": 0.2 + 0.3 * i} for i in range(1, 8)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    obj = Objective(metric="eval/pass_rate", reduce="asymptote", x="gpu_hours")
    with pytest.raises(RuntimeError, match=r"outside \[0, 1\]"):
        _fitted_score(run, obj, optuna.trial.FixedTrial({}))
