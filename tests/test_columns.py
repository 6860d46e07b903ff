"""The one rule that finds a log's or a table's score and compute columns, and the column a
name given with --x/--y/--by means (ablate/readers/columns.py, issue 51 point 6). Fast: names
in, names out."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.errors import InputError
from ablate.readers.columns import (find_compute, find_score, is_loss, resolve, scale_hint,
                                    table_axes)


def test_dots_and_slashes_are_one_separator():
    cols = ["step", "eval/math/accuracy", "train/loss"]
    assert resolve("eval.math.accuracy", cols) == "eval/math/accuracy"
    assert resolve("eval/math/accuracy", ["eval.math.accuracy"]) == "eval.math.accuracy"
    assert resolve("eval/math/accuracy", cols) == "eval/math/accuracy"  # as written first
    assert resolve("eval.math.acc", cols) is None
    assert resolve("a.b", ["a/b", "a.b"]) == "a.b"  # exact wins
    assert resolve("a_b", ["a/b", "a.b"]) is None


@pytest.mark.parametrize("cols,want", [
    (["step", "tokens", "eval/acc"], "tokens"),
    (["step", "num_samples", "eval/acc"], "num_samples"),
    (["step", "samples", "flops", "gpu_hours"], "gpu_hours"),  # ablate's own, first
    (["_step", "train/total_flos", "tokens"], "train/total_flos"),
    (["step", "train.num_tokens"], "train.num_tokens"),
    (["variant", "compute", "tokens"], "compute"),  # ablate's long table
    (["step", "perf/total_num_tokens"], None),  # per step: summed by the reader, not taken
    (["step", "eval/acc"], None),
])
def test_a_cumulative_count_beats_the_step_as_compute(cols, want):
    assert find_compute(cols) == want


def test_score_rules_take_dotted_names_and_bare_pass_rates():
    assert find_score(["eval.pass_rate", "train/reward"], "f") == ("eval.pass_rate",
                                                                    "auto-detected")
    assert find_score(["pass_rate", "gpu_hours"], "f")[0] == "pass_rate"
    assert find_score(["eval/math/accuracy", "train/loss", "tokens"], "f")[0] \
        == "eval/math/accuracy"
    with pytest.raises(InputError, match="--y accuracy or --y pass_rate"):
        find_score(["accuracy", "pass_rate", "tokens"], "f")


def test_a_plain_table_finds_its_columns_as_a_log_does_and_says_so():
    x, y, by, said = table_axes(["run", "step", "gpu_hours", "pass_rate"], "runs.csv",
                                x=None, y=None, by=[], skip=("variant", "run"))
    assert (x, y, by) == ("gpu_hours", "pass_rate", [])
    assert said == ["runs.csv: score = 'pass_rate' (auto-detected), compute = 'gpu_hours' "
                    "(auto-detected)"]
    # ablate's own long table: nothing to say
    assert table_axes(["variant", "seed", "compute", "score"], "t.csv", x=None, y=None, by=[],
                      skip=("variant",)) == ("compute", "score", [], [])
    # given names as the file writes them, dotted or slashed
    x, y, by, _ = table_axes(["arm", "step", "eval.math.accuracy", "tokens"], "t.csv",
                             x="step", y="eval/math/accuracy", by=["arm"], skip=())
    assert (x, y, by) == ("step", "eval.math.accuracy", ["arm"])
    # only a step: taken, and said how to convert
    x, _, _, said = table_axes(["run", "step", "acc"], "t.csv", x=None, y=None, by=[],
                               skip=("run",))
    assert x == "step" and "--step-cost" in said[0]
    with pytest.raises(InputError, match=r"no column 'Run' for --by; columns: run, step"):
        table_axes(["run", "step", "acc"], "t.csv", x=None, y=None, by=["Run"], skip=())


def test_a_loss_is_never_taken_as_the_score():
    """A falling curve fitted as a rising one is a wrong answer in silence: the only column
    (or the only eval/ one) is not the score when it is a loss."""
    assert find_score(["train/loss", "eval/acc"], "f")[0] == "eval/acc"
    with pytest.raises(InputError, match="'loss' reads as a loss|loss reads as a loss"):
        find_score(["loss"], "f")
    with pytest.raises(InputError, match="a loss is never taken as the score: eval/loss"):
        find_score(["eval/loss", "reward_std", "lr"], "f")


def test_a_loss_gets_a_loss_hint_not_a_scale():
    assert is_loss("train/loss") and is_loss("eval.loss") and is_loss("kl") \
        and not is_loss("eval/pass_rate") and not is_loss("closs_rate")
    hint = scale_hint("train/loss", np.array([1.2, 2.0]))
    assert "lower is better" in hint and "--y-range" not in hint and "percent" not in hint
    assert "--y-range 0 100 (percent)" in scale_hint("acc", np.array([3.0, 70.0]))
