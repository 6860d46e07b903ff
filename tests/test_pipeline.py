"""The one analysis pipeline (ablate.analysis.pipeline): one fit window per comparison, the
answer sentence above every ranking, and report == compare for the same options."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import synthetic as sy
from _curves_util import curves_frame, run_cli, write_study

N_BOOT = 300


def _curves(frame: pd.DataFrame):
    from ablate.analysis.sources import Curves

    return Curves(frame, "synthetic", "compute", "score")


def _early_phase_pair(trial: int, seeds: int = 3) -> pd.DataFrame:
    """Two variants from ONE generator (the same sigmoid with the same kind of transient early
    phase), different noise seeds: any difference between them is noise or the window."""
    truth = sy.Truth(0.6, 1.5, 3000.0, 0.2)
    rows = []
    for vi, v in enumerate(("a", "b")):
        for k in range(seeds):
            _, c, y = sy.early_phase(np.random.default_rng([trial, vi, k]), truth=truth,
                                     n_points=60)
            rows += [{"variant": v, "seed": k, "compute": x, "score": s} for x, s in zip(c, y)]
    return pd.DataFrame(rows)


def _p(rows) -> float:
    return next(r.p_beats for r in rows if r.p_beats is not None)


def test_shared_window_makes_identical_generators_tie():
    from ablate.analysis.compare import compare
    from ablate.analysis.variant_fits import fit_groups
    from ablate.analysis.pipeline import Options, analyze_curves

    curves = _curves(_early_phase_pair(10))
    own = fit_groups(curves, n_boot=N_BOOT)  # each variant's own shape-chosen start
    own_starts = [g.fit.min_compute for g in own]
    assert own_starts[0] != own_starts[1]  # the per-variant rule fits them on different spans
    a = analyze_curves(curves, Options(n_boot=N_BOOT))
    assert a.window.rule == "shared" and a.window.lo == max(own_starts)
    assert [g.fit.min_compute for g in a.groups] == [a.window.lo] * 2  # one span for both
    assert all(g.fit.window_rule == "shared" for g in a.groups)
    assert abs(a.groups[0].fit.A - a.groups[1].fit.A) < a.options.margin
    assert 0.3 < _p(a.rows) < 0.7
    # what the per-variant windows said about the same data, for contrast
    assert abs(_p(compare(own, n_boot=N_BOOT)) - 0.5) > abs(_p(a.rows) - 0.5)


def test_single_curve_keeps_its_own_window():
    from ablate.analysis.pipeline import Options, analyze_curves

    frame = _early_phase_pair(10)
    a = analyze_curves(_curves(frame[frame["variant"] == "a"]), Options(n_boot=0))
    assert a.window.rule == "auto" and a.groups[0].fit.window_rule == "auto"


def test_given_min_compute_wins_over_shapes():
    from ablate.analysis.pipeline import Options, analyze_curves

    a = analyze_curves(_curves(_early_phase_pair(10)), Options(min_compute=500.0, n_boot=0))
    assert a.window.rule == "given" and {g.fit.min_compute for g in a.groups} == {500.0}


def _answer(frame: pd.DataFrame, **kw) -> str:
    from ablate.analysis.answer import answer_sentence
    from ablate.analysis.pipeline import Options, analyze_curves

    return answer_sentence(analyze_curves(_curves(frame), Options(n_boot=N_BOOT, **kw)))


def test_answer_when_A_differs():
    s = _answer(curves_frame(seed=1))  # cispo A 0.66 vs ppo 0.55
    assert s.startswith("cispo has the higher ceiling: A 0.6")
    assert "for ppo, more than the 0.02 margin" in s
    assert "(baseline cispo; window " in s and s.endswith(" compute).")


def test_answer_when_A_ties_and_B_does_not_differ():
    same = {"x": sy.Truth(0.6, 1.6, 0.01, 0.1), "y": sy.Truth(0.6, 1.6, 0.01, 0.1)}
    s = _answer(curves_frame(seed=2, truths=same))
    assert "tie on A (" in s and "within 0.02" in s and "no difference at this budget" in s
    assert "(baseline x; window" in s


def test_answer_when_B_differs_within_an_A_tie():
    fast = {"slow": sy.Truth(0.6, 1.5, 0.005, 0.1), "fast": sy.Truth(0.6, 4.0, 0.005, 0.1)}
    s = _answer(curves_frame(seed=3, truths=fast, seeds=3), baseline="slow")
    assert s.startswith("fast and slow tie on A (") and "fast reaches it with less compute" in s
    assert "(baseline slow;" in s


def test_answer_single_variant():
    frame = curves_frame(seed=4)
    s = _answer(frame[frame["variant"] == "ppo"])
    assert s.startswith("ppo: A 0.5") and "nothing to compare it with" in s
    assert "baseline" not in s


def test_answer_adaptive_study_stopped_and_not_scaled(tmp_path):
    """stage 1 left only `base` and scale_winner is false: the sentence says base stands at 20%
    of the final budget and was not scaled, and that the other variant was stopped."""
    from ablate.analysis.answer import answer_sentence
    from ablate.analysis.pipeline import Options, analyze

    truths = {"base": sy.Truth(0.66, 1.6, 0.01, 0.1), "other": sy.Truth(0.5, 1.6, 0.01, 0.1)}
    d = write_study(tmp_path, curves_frame(seed=5, truths=truths), name="adaptive")
    (d / "study.yaml").write_text("name: adaptive\nstages: {budgets: [0.2], scale_winner: false}\n"
                                  "fit: {x: gpu_hours, y: eval/pass_rate}\n")
    (d / "stages.json").write_text(json.dumps({
        "budgets": [{"flops": 5e11}, {"flops": 2.5e12}],
        "decisions": [{"stage": 0, "budget": {"flops": 5e11}, "kept": ["base"],
                       "stopped": {"other": "A's upper bound below base's lower bound"},
                       "fits": {}}]}))
    s = answer_sentence(analyze(d, Options(n_boot=0)))
    assert "other stopped at stage 1 of 2, at 20% of the final budget (flops 5e+11 of " \
           "2.5e+12)" in s
    assert "base was the only variant left after stage 1 of 2 and was not scaled " \
           "(scale_winner: false): it stands at 20% of the final budget" in s
    assert "reached the final budget" not in s


def test_compare_prints_the_answer_and_json_has_one_window(tmp_path, capsys):
    d = write_study(tmp_path, curves_frame(seed=6))
    code, out, err = run_cli(["compare", d, "--json"], capsys)
    assert code == 0, err
    obj = json.loads(out)
    rows = obj["rows"]
    assert obj["window"]["rule"] == "shared" and obj["window"]["min_compute"] == rows[0]["window"][0]
    assert len({tuple(r["window"][:1]) for r in rows}) == 1
    assert {r["window_rule"] for r in rows} == {"shared"}
    code, out, err = run_cli(["compare", d], capsys)
    assert code == 0, err
    assert out.splitlines()[0].startswith("cispo has the higher ceiling")


@pytest.mark.parametrize("opts", [[], ["--bin", "20", "--baseline", "ppo", "--margin", "0.05"],
                                  ["--min-compute", "0.01", "--method", "paper"]])
@pytest.mark.slow
def test_report_numbers_equal_compare_json(tmp_path, capsys, opts):
    d = write_study(tmp_path, curves_frame(seed=7))
    code, out, err = run_cli(["compare", d, "--json", *opts], capsys)
    assert code == 0, err
    cmp = json.loads(out)["rows"]
    code, out, err = run_cli(["report", d, "--json", "--out", tmp_path / "r.html", *opts], capsys)
    assert code == 0, err
    rep = json.loads(out)["ranking"]
    keys = ["variant", "rank", "A", "B", "C_mid", "R0", "A_ci", "B_ci", "p_beats_baseline",
            "window", "n_points", "binned_from"]
    assert [{k: r[k] for k in keys} for r in rep] == [{k: r[k] for k in keys} for r in cmp]


def test_study_answer_is_what_compare_prints(tmp_path, capsys):
    from ablate.analysis.answer import study_answer

    d = write_study(tmp_path, curves_frame(seed=8))
    code, out, err = run_cli(["compare", d], capsys)
    assert code == 0, err
    assert " ".join(out.split("ranking by asymptote A")[0].split()) == study_answer(d)
    assert study_answer(tmp_path / "nothing").startswith("no answer yet: ")


def test_options_default_n_boot_is_the_fits():
    from ablate.analysis.fit import N_BOOT as FIT_N_BOOT
    from ablate.analysis.pipeline import Options

    assert Options().n_boot == FIT_N_BOOT  # kept apart only so the CLI starts without numpy
