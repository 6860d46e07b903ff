"""The trainer's plans say their counts in agreed words: `1 engine of 1 GPU`, `2 engines of
2 GPUs`, never `engine(s)` (trainer/counted.py; ablate's own words use number_text.count)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_time_plan import PAPER_LIMITS, PAPER_SHAPE, paper

from trainer.counted import count
from trainer.plan.time_plan import plan_time


def test_count_agrees_with_its_number():
    assert count(1, "engine") == "1 engine"
    assert count(2, "engine") == "2 engines"
    assert count(0, "GPU") == "0 GPUs"
    assert count(1200, "usable problem") == "1,200 usable problems"
    assert count(2, "child", "children") == "2 children"


@pytest.mark.parametrize("gpus,tp,words", [(1, 1, "1 engine of 1 GPU"),
                                           (2, 2, "1 engine of 2 GPUs"),
                                           (2, 1, "2 engines of 1 GPU")])
def test_a_plan_says_its_engines_and_gpus_in_agreed_words(gpus, tp, words):
    c = paper(rollout={"vllm": {"generation_gpus": gpus, "tensor_parallel_size": tp}})
    t = plan_time(c, replace(PAPER_SHAPE, nodes=1), PAPER_LIMITS)
    assert any(a.startswith(words + ",") for a in t.assumptions), t.assumptions
    assert not any("(s)" in a for a in t.assumptions), t.assumptions
