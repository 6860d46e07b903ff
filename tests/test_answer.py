"""The answer sentence names variants as the table does: shortened to the values that differ,
the axis named once (ablate.analysis.answer.names_for over ablate.analysis.labels.shorten)."""

from __future__ import annotations

import json

import synthetic as sy
from _curves_util import curves_frame, run_cli, write_study

HIGH, LOW = sy.Truth(0.66, 1.6, 0.01, 0.1), sy.Truth(0.5, 1.6, 0.01, 0.1)


def _answer(truths: dict, tmp_path=None, **kw) -> str:
    from ablate.analysis.answer import answer_sentence
    from ablate.analysis.pipeline import Options, analyze_curves
    from ablate.analysis.sources import Curves

    frame = curves_frame(seed=21, truths=truths)
    return answer_sentence(analyze_curves(Curves(frame, "synthetic", "compute", "score"),
                                          Options(n_boot=0, **kw)))


def test_one_axis_named_once_values_as_in_the_table(tmp_path, capsys):
    truths = {"off_policy.mode=pipeline": HIGH, "off_policy.mode=ppo_off_policy": LOW}
    d = write_study(tmp_path, curves_frame(seed=22, truths=truths))
    code, out, err = run_cli(["compare", d], capsys)
    assert code == 0, err
    s = " ".join(out.split("\nranking by")[0].split())  # the sentence, folded at 100 piped
    assert s.startswith("off_policy.mode: pipeline has the higher ceiling: A 0.6"), s
    assert "for ppo_off_policy, more than" in s and "(baseline pipeline;" in s
    assert s.count("off_policy.mode") == 1 and "=" not in s.split(" (baseline")[0]
    assert "off_policy.mode: pipeline | ppo_off_policy" in out  # the table's legend, same names


def test_several_axes_values_as_tuples_fixed_axis_left_out():
    truths = {"optim.lr=1e-4,loss.type=cispo,seed_axis=a": HIGH,
              "optim.lr=1e-3,loss.type=dapo,seed_axis=a": LOW}
    s = _answer(truths)
    assert s.startswith("(optim.lr, loss.type): (1e-4, cispo) has the higher ceiling"), s
    assert "for (1e-3, dapo)" in s and "(baseline (1e-4, cispo);" in s
    assert "seed_axis" not in s and "optim.lr=" not in s


def test_one_fitted_variant_with_an_axis_prefix():
    """The other variant is flat (cannot be fit): the sentence still names the axis once."""
    truths = {"loss.type=cispo": HIGH, "loss.type=flat": sy.Truth(0.1, 1.6, 0.01, 0.1)}
    s = _answer(truths)
    assert s.startswith("loss.type: cispo has A 0.6"), s
    assert "could not be fit: flat" in s and s.count("loss.type") == 1


def test_plain_names_and_one_at_a_time_labels_stay_as_written():
    s = _answer({"base": HIGH, "loss.type=dapo": LOW})  # a one-at-a-time study: no common axes
    assert s.startswith("base has the higher ceiling") and "for loss.type=dapo" in s


def test_stopped_and_unscaled_variants_shortened(tmp_path):
    from ablate.analysis.answer import answer_sentence
    from ablate.analysis.pipeline import Options, analyze

    truths = {"loss.type=cispo": HIGH, "loss.type=dapo": LOW}
    d = write_study(tmp_path, curves_frame(seed=23, truths=truths), name="adaptive")
    (d / "study.yaml").write_text("name: adaptive\nstages: {budgets: [0.2], scale_winner: false}\n"
                                  "fit: {x: gpu_hours, y: eval/pass_rate}\n")
    (d / "stages.json").write_text(json.dumps({
        "budgets": [{"flops": 5e11}, {"flops": 2.5e12}],
        "decisions": [{"stage": 0, "budget": {"flops": 5e11}, "kept": ["loss.type=cispo"],
                       "stopped": {"loss.type=dapo": "A's upper bound below cispo's lower bound"},
                       "fits": {}}]}))
    s = answer_sentence(analyze(d, Options(n_boot=0)))
    assert s.startswith("loss.type: cispo has the higher ceiling"), s
    assert "dapo stopped at stage 1 of 2, at 20% of the final budget" in s
    assert "cispo was the only variant left after stage 1 of 2 and was not scaled" in s
    assert "loss.type=" not in s


def test_advice_to_pin_a_ceiling_always_points_past_the_compute_the_runs_reached():
    """compare's "needs about C to pin it" once said 1.52e+11 flops for runs that reached
    4.02e+11 (issue 41): a compute at or behind the runs is never the advice."""
    import re

    from ablate.analysis.answer import compute_to_pin, pin_advice
    from ablate.analysis.fit import Fit

    for c_mid, reached in ((1e10, 4.02e11), (5e11, 4.02e11)):
        f = Fit(A=0.8, B=1.0, C_mid=c_mid, R0=0.3, ci={"A": (0.7, 0.99)}, r2=0.98,
                n_points=30, max_compute=reached)
        text = pin_advice(f, "flops")
        named = [float(v) for v in re.findall(r"(\d[\d.]*e[+-]?\d+) flops", text)]
        if compute_to_pin(f) <= reached:
            assert "already reach 4.02e+11" in text and "more seeds" in text, text
            assert "train past 8.04e+11" in text, text
        else:
            assert "needs about 1.5e+12 flops" in text, text
        assert all(v >= reached for v in named), text
