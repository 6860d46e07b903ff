"""The time plan's eval term with eval engines pinned at their step's weights
(trainer/plan/time_plan.py eval_cost_s, trainer/generation/pins.py): hand-computed cases."""

from __future__ import annotations

import pytest

from trainer.plan.placement import eval_engines
from trainer.plan.time_jobs import TimePlan
from trainer.plan.time_plan import eval_cost_s


def plan(gen: float, train: float, mode: str, eval_s: float = 1000.0) -> TimePlan:
    step = max(gen, train) if mode == "pipeline" else gen + train
    return TimePlan(generation_s=gen, train_s=train, step_s=step, eval_s=eval_s)


def config_in(mode: str):
    """The paper recipe in that off-policy mode (only the mode is read here)."""
    from test_time_plan import paper

    return paper(off_policy={"mode": mode, "k": 1})


def test_half_of_rank0s_node_engines_serve_an_eval():
    assert [eval_engines(r) for r in (1, 2, 3, 4, 8)] == [1, 1, 1, 2, 4]


def test_generation_bound_an_eval_costs_its_tokens_on_the_node_whatever_it_pins():
    # R = 4, E = 2: the eval takes 2 x 1,000 s; node 0's share decodes on 2 engines, so a
    # step takes 200 s instead of 100: 2,000 s x (1 - 100/200) = 1,000 s, the eval's own time
    # on all 4 engines
    t = plan(100, 50, "pipeline")
    eval_cost_s(config_in("pipeline"), t, 4)
    assert t.eval_s == pytest.approx(2000) and t.eval_cost_s == pytest.approx(1000)
    assert not t.eval_blocks_training
    # R = 3, E = 1: 3,000 s of eval; steps 150 s instead of 100: 3,000 x 1/3 = 1,000 s again
    t = plan(100, 50, "pipeline")
    eval_cost_s(config_in("pipeline"), t, 3)
    assert t.eval_s == pytest.approx(3000) and t.eval_cost_s == pytest.approx(1000)


def test_training_bound_the_remaining_engines_keep_up_and_the_eval_costs_nothing():
    t = plan(60, 200, "pipeline")  # node 0's generation doubles to 120 s, training takes 200
    eval_cost_s(config_in("pipeline"), t, 4)
    assert t.eval_s == pytest.approx(2000) and t.eval_cost_s == pytest.approx(0)


def test_taking_turns_every_slower_generation_costs():
    t = plan(100, 50, "ppo_off_policy")  # a step 150 s; slowed: 200 + 50 = 250 s
    eval_cost_s(config_in("ppo_off_policy"), t, 4)
    assert t.eval_cost_s == pytest.approx(2000 * (1 - 150 / 250))


def test_one_engine_is_shared_and_the_eval_blocks_training():
    t = plan(100, 50, "pipeline")
    eval_cost_s(config_in("pipeline"), t, 1)
    assert t.eval_s == pytest.approx(1000) and t.eval_cost_s == pytest.approx(1000)
    assert t.eval_blocks_training is True


def test_the_paper_plan_on_one_node_evaluates_on_two_of_four_engines():
    """One node: the eval pins half its engines (on several, every node's engines decode it,
    rollouts paused: tests/test_time_plan.py)."""
    from dataclasses import replace

    from test_time_plan import PAPER_LIMITS, PAPER_SHAPE, paper

    from trainer.plan.time_plan import plan_time

    t = plan_time(paper(eval={"num_prompts": 200}), replace(PAPER_SHAPE, nodes=1), PAPER_LIMITS)
    assert t.step_s == t.generation_s  # generation-bound: the eval costs half its duration
    assert t.eval_cost_s == pytest.approx(t.eval_s / 2)
    assert t.eval_s < t.eval_interval_s  # ends before the next is due
    assert any("eval on 2 of rank 0's node's 4 engines" in a for a in t.assumptions)
