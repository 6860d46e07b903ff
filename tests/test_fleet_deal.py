"""A step dealt over the fleet (issue 46 point 3): in pipeline mode with vLLM every node's
feeder makes its share of each step's prompt groups, dealt like cards where they do not divide
(trainer/plan/placement.py shares; trainer/generation/feeders.py), so the paper's 48 prompts
x 16 plan and run on 10 nodes; the plan charges the node with the largest share."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_time_plan import PAPER_LIMITS, PAPER_SHAPE, paper

from trainer.algo.pool import DataPosition, PromptPool
from trainer.config import TrainConfig
from trainer.plan.placement import largest_share, placement_note, shares
from trainer.plan.time_plan import plan_time
from trainer.plan.topology import topology
from trainer.validate import problems


def test_48_prompts_are_dealt_5_to_eight_nodes_and_4_to_two():
    assert shares(48, 10) == [5] * 8 + [4] * 2
    assert shares(48, 8) == [6] * 8 and shares(48, 1) == [48]
    for per_step in range(1, 60):
        for n in range(1, per_step + 1):
            s = shares(per_step, n)
            assert sum(s) == per_step and max(s) - min(s) <= 1 and min(s) >= 1, (per_step, n, s)


def test_uneven_shares_never_draw_one_prompt_twice_and_together_take_the_pool_order():
    """Ten feeders, each with its own copy of the pool (same seed, as every node has), draw
    their dealt shares with the trainer's own `draw` over several steps, in calls of varying
    size (the stream admits what the lag allows): no pool position is taken twice, and the
    first step's 48 prompts are the pool's first 48, as one feeder would draw them."""
    from trainer.generation.offpolicy import Context, draw

    c = TrainConfig.model_validate({"rollout": {"backend": "vllm", "prompts_per_step": 48,
                                                "generations_per_prompt": 16}})
    n_pool, nodes = 4800, 10
    reference = PromptPool([0.0] * n_pool, c.data, c.seed).next_batch(48 * 5)
    dealt = shares(48, nodes)
    taken: dict[int, list[int]] = {}
    for j in range(nodes):
        ctx = Context(c, None, None, DataPosition(PromptPool([0.0] * n_pool, c.data, c.seed)),
                      [])
        calls = [dealt[j]] + [1, dealt[j] - 1] + [dealt[j]] * 3  # step 0 whole, then split
        taken[j] = [i for n in calls for i in draw(ctx, n, j, nodes, width=dealt[0])[0]]
    everything = [i for t in taken.values() for i in t]
    assert len(everything) == len(set(everything)) == 5 * 48  # five steps of 48, none twice
    first = [taken[j][k] for j in range(nodes) for k in range(dealt[j])]
    assert sorted(first) == sorted(reference[:48])


def test_the_paper_step_plans_on_10_nodes_charging_the_largest_share():
    """Every node split alike (6/2: with node roles `auto` takes 8 + 2 on 10 nodes, whose 8
    generation nodes divide 48 evenly)."""
    split = {"vllm": {"generation_gpus": 6}}
    c = paper(eval={"num_prompts": 50}, rollout=split)
    ten = replace(PAPER_SHAPE, nodes=10, ranks_auto=True)
    assert problems(c, ten) == []  # no `prompts_per_step % nodes` rule
    t48 = plan_time(c, ten, PAPER_LIMITS)
    assert t48.step_s and not t48.note, t48.note
    # The step waits for the 5-prompt nodes: the same generation time as 50 prompts (5 each),
    # longer than 40 (4 each)
    t50 = plan_time(paper(eval={"num_prompts": 50}, rollout={"prompts_per_step": 50, **split}),
                    ten, PAPER_LIMITS)
    t40 = plan_time(paper(eval={"num_prompts": 50}, rollout={"prompts_per_step": 40, **split}),
                    ten, PAPER_LIMITS)
    assert largest_share(c, 10) == 5
    assert t48.generation_s == pytest.approx(t50.generation_s, rel=1e-9)
    assert t48.generation_s > t40.generation_s
    note = placement_note(c, ten, topology(c, ten))
    assert "(10 nodes, " in note and "each node 4-5 of a step's 48 prompt groups" in note, note


def test_the_paper_run_scales_out_with_evals_on_every_nodes_engines():
    """Issue 46 point 5, by the plan: the paper recipe (recipes/scalerl.yaml, 1,000-prompt
    eval) on 2 .. 12 nodes of 8 H100s, one rank per training GPU (the auto split): every
    node count reaches its budget (evals on every engine of the fleet, rollouts paused, no
    longer pile up on 3 engines of rank 0's node), the eval shrinks with the engines, and the
    GPU-hours a run at 10 nodes stay within 1.25x of 2 nodes' (the issue's target)."""
    limits = replace(PAPER_LIMITS, max_requeues=None, auto_requeues=True)
    got = {}
    for n in (2, 3, 4, 6, 8, 10, 12):
        t = plan_time(paper(), replace(PAPER_SHAPE, nodes=n, ranks_auto=True), limits)
        assert t.reaches_budget is True and not t.problem, (n, t.problem)
        got[n] = t
    evals = [got[n].eval_s for n in sorted(got)]
    assert evals == sorted(evals, reverse=True) and got[2].eval_s > 4 * got[10].eval_s
    ratio = got[10].gpu_hours / got[2].gpu_hours
    print(f"GPU-h a run: 2 nodes {got[2].gpu_hours:,.0f}, 10 nodes {got[10].gpu_hours:,.0f} "
          f"({ratio:.2f}x); wall at 10 nodes {got[10].wall_h:,.0f} h")
    assert ratio <= 1.25 and got[10].wall_h < got[2].wall_h / 3


def test_the_plan_decodes_as_many_sequences_as_the_stream_starts():
    """Issue 46 point 6, one concurrency rule: the stream reserves each sample's whole
    footprint in its engine's KV blocks (trainer/generation/dealing.py Room, footprint); the
    plan's engine concurrency counts the same (trainer/plan/time_model.py engine_concurrency),
    not the mean context (which counted ~1.8x as many: 44 against 24 for the paper recipe)."""
    import math

    from trainer.generation.dealing import Room, footprint, pick
    from trainer.plan.memory import (CUDA_OVERHEAD_GIB, VLLM_UTILIZATION, kv_bytes_per_token)
    from trainer.plan.model_shape import KNOWN, ModelShape
    from trainer.plan.time_model import engine_concurrency, lengths

    c = paper()
    m = ModelShape(**KNOWN["Qwen/Qwen3-8B"], source="test")
    shape = replace(PAPER_SHAPE, ranks_auto=True)
    topo = topology(c, shape)
    prompt, completion = lengths(c)
    planned = engine_concurrency(c, m, topo, 10_000, prompt + completion)
    room_bytes = VLLM_UTILIZATION * 80 * 2**30 - m.params * 2 - CUDA_OVERHEAD_GIB * 2**30
    room = Room(blocks=int(room_bytes / kv_bytes_per_token(c, m)) // 16, block_size=16,
                max_seqs=1024)
    foot = footprint(int(prompt), int(completion))
    started = 0
    while pick([room], foot, [0]) == 0:
        room.take(foot)
        started += 1
    assert started == math.floor(planned) == 24, (started, planned)
