"""Adaptive studies (`stages:`): stop variants that cannot win, continue the rest."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from _study_util import cli, cli_json, metric_steps, tiny_study

from ablate.analysis.fit import sigmoid
from ablate.analysis.variant_fits import GroupFit
from ablate.analysis.fitters import fit_sigmoid
from ablate.studies.adaptive import promote as _promote
from ablate.studies.stage_rules import decide, score_levels
from ablate.studydir import StudyStore, stopped_variants

ENTRY = "_stage_entry:synthetic_run"
AXES = "  optim.lr: [1.5e-4, 3.0e-4, 3.001e-4]\n"  # true A 0.30, 0.600, 0.6002 (_stage_entry.py)
STAGES = "stages: {budgets: [{steps: 40}]}\n"


def _group(name: str, A: float, seed: int) -> GroupFit:
    rng = np.random.default_rng(seed)
    c = np.linspace(0.002, 0.08, 40)
    y = sigmoid(c, A, 1.5, 0.01, 0.1) + rng.normal(0, 0.004, c.size)
    return GroupFit(name, fit_sigmoid(c, y, n_boot=200), None, c.size)


def test_decide_stops_only_what_cannot_win():
    low, best, close = _group("low", 0.30, 0), _group("best", 0.62, 1), _group("close", 0.615, 2)
    d = decide([low, best, close], stage=0, budget={"steps": 40})
    assert set(d.stopped) == {"low"} and d.kept == ["best", "close"]
    assert "upper bound" in d.stopped["low"] and "lower bound" in d.stopped["low"]
    assert low.fit.ci["A"][1] < max(best.fit.ci["A"][0], close.fit.ci["A"][0])
    # The margin rule, opt-in: 'close' is 0.005 below 'best' (intervals that overlap since R0 is
    # fitted on a late start: 0.02 apart they no longer do), 'low' far below.
    d = decide([low, best, close], baseline="best", margin=0.05)
    assert set(d.stopped) == {"low"}
    d = decide([low, best, close], baseline="best", margin=0.0)
    assert set(d.stopped) == {"low", "close"} and "baseline best" in d.stopped["close"]
    # A variant whose fit failed is kept (nothing is stopped on a curve we cannot read), one
    # whose runs all diverged stops.
    d = decide([low, GroupFit("nofit", None, "too few points", 3)],
               dead={"gone": "every run diverged"})
    assert "nofit" in d.kept and d.stopped == {"gone": "every run diverged"}


def test_collapse_rule_stops_a_refused_fit_whose_score_fell_below_the_best():
    best = _group("best", 0.62, 1)
    lo = best.fit.ci["A"][0]
    # Curves as the trainer logs them: a collapsed variant (an LR too high) falls from its
    # start to near zero and its fit is refused; a slow one has not risen yet.
    c = np.linspace(0.002, 0.08, 12)
    frame = pd.concat([pd.DataFrame({"variant": v, "seed": sd, "compute": c, "score": y})
                       for v, y in {"fell": np.linspace(0.45, 0.03, 12),
                                    "slow": np.full(12, 0.45) + 0.01 * np.arange(12) % 2,
                                    "dip": np.linspace(0.80, 0.70, 12)}.items()
                       for sd in (0, 1)], ignore_index=True)
    levels = score_levels(frame)
    assert levels["fell"][0] == pytest.approx(np.mean(np.linspace(0.45, 0.03, 12)[:3]))
    assert levels["fell"][1] < 0.1
    refused = [GroupFit(n, None, "score is flat or decreasing with compute", 24)
               for n in ("fell", "slow", "dip")]
    d = decide([best, *refused], levels=levels)
    assert set(d.stopped) == {"fell"} and "collapsed" in d.stopped["fell"]
    assert f"{lo:.3f}" in d.stopped["fell"]
    # A rise then a fall back (sampling too cold): stopped from its peak, not its start.
    rise_fall = np.concatenate([np.linspace(0.45, 0.72, 6), np.linspace(0.70, 0.52, 6)])
    peaked = score_levels(pd.DataFrame({"variant": "peaked", "seed": 0, "compute": c,
                                        "score": rise_fall}))
    assert "peaked" in decide([best, GroupFit("peaked", None, "flat", 12)],
                              levels=peaked).stopped
    # 'dip' fell by more than the drop but stays above what the best can be sure of: kept.
    assert levels["dip"][1] > lo and "dip" in d.kept and "slow" in d.kept
    # Without a fitted variant to compare with, nothing is stopped on a refused fit.
    assert decide(refused, levels=levels).stopped == {}


@pytest.mark.slow
def test_adaptive_sweep_stops_promotes_and_resumes_between_stages(tmp_path):
    study = tiny_study(tmp_path, "ad", AXES, seeds="[0, 1]", steps=100, extra=STAGES)
    res = tmp_path / "res"
    # First call: stage 0 only (debug executor: runs in-process, so they end before it returns).
    out = cli_json("sweep", str(study), "--results", str(res), "--executor", "debug",
                   "--entry", ENTRY)
    assert out["stage"] == 0 and len(out["submitted"]) == 6 and not out["finished"]
    sd = res / "ad"
    assert all(metric_steps(sd / rid)[-1] == 40 for rid in out["submitted"])
    # Rerun (as after an interruption): decides stage 0, promotes survivors, runs stage 1.
    out2 = cli_json("sweep", str(study), "--results", str(res), "--executor", "debug",
                    "--entry", ENTRY)
    assert out2["finished"] and out2["stage"] == 1 and len(out2["submitted"]) == 4
    stopped = stopped_variants(sd)
    assert list(stopped) == ["optim.lr=0.00015"] and stopped["optim.lr=0.00015"]["stage"] == 0
    variants = json.loads((sd / "variants.json").read_text())
    for v in variants:
        steps = metric_steps(sd / v["run_id"])
        want = 40 if v["name"] in stopped else 100
        assert steps == list(range(1, want + 1))  # continued, no step twice, none missing
    # A third call changes nothing.
    out3 = cli_json("sweep", str(study), "--results", str(res), "--executor", "debug",
                    "--entry", ENTRY)
    assert out3["submitted"] == [] and out3["finished"]
    st = cli_json("status", str(sd))
    assert {r["name"]: (r["stopped"] or {}).get("stage") for r in st} == {
        "optim.lr=0.00015": 0, "optim.lr=0.0003": None, "optim.lr=0.0003001": None}
    table = cli("status", str(sd)).stdout
    assert "stopped at stage 0" in table and "upper bound" in table
    cmp = cli_json("compare", str(sd))["rows"]
    by = {r["variant"]: r for r in cmp}
    assert by["optim.lr=0.00015"]["stopped"]["stage"] == 0
    assert by["optim.lr=0.0003001"]["stopped"] is None


def test_promotion_restates_a_runs_progress_against_its_new_budget(tmp_path):
    study = tiny_study(tmp_path, "pr", AXES, seeds="[0]", steps=100, extra=STAGES)
    out = cli_json("sweep", str(study), "--results", str(tmp_path / "res"), "--executor",
                   "debug", "--entry", ENTRY)
    sd = tmp_path / "res" / "pr"
    _promote(StudyStore(sd), out["submitted"], {"steps": 100}, 1)
    for r in cli_json("status", str(sd)):  # 40 of 100 steps: 40%, not the stage's 100%
        assert r["state"] == "pending" and r["progress"] == pytest.approx(0.4)


@pytest.mark.slow
def test_adaptive_sweep_wait_runs_every_stage_with_the_real_trainer(tmp_path):
    # Too few points to fit at stage 0: nothing can be judged, so everything continues, from
    # the real trainer's checkpoints.
    study = tiny_study(tmp_path, "adr", "  optim.lr: [1.0e-4, 1.0e-3]\n", steps=4,
                       extra="stages: {budgets: [{steps: 2}]}\n")
    out = cli_json("sweep", str(study), "--results", str(tmp_path / "res"), "--executor",
                   "debug", "--wait")
    assert out["finished"] and out["decisions"][0]["stopped"] == {}
    assert all("error" in f for f in out["decisions"][0]["fits"].values())
    for v in json.loads((tmp_path / "res" / "adr" / "variants.json").read_text()):
        assert metric_steps(tmp_path / "res" / "adr" / v["run_id"]) == [0, 2, 4]


@pytest.mark.parametrize("extra, msg", [
    ("stages: {budgets: [{steps: 200}]}\n", "below the final budget"),
    ("stages: {budgets: [{steps: 20}, {steps: 10}]}\n", "must increase"),
    ("stages: {budgets: [{gpu_hours: 0.1}]}\n", "must be steps below"),
    ("stages: {budgets: [{steps: 20}], baseline: nope}\n", "stages.baseline 'nope' is not a variant"),
    ("stages: {budgets: [{steps: 20}], margins: 0.1}\n", "did you mean 'margin'"),
])
def test_bad_stages_exit_2_and_write_nothing(tmp_path, extra, msg):
    study = tiny_study(tmp_path, "bad", AXES, steps=100, extra=extra)
    r = cli("sweep", str(study), "--results", str(tmp_path / "res"), "--executor", "debug")
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "bad.yaml:" in r.stderr and not (tmp_path / "res").exists()
