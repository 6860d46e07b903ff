"""Micro-batching by tokens (engine.micro_batch_tokens, trainer/loop/microbatch.py).

Units: the token weights are the registered aggregations' own, and summing them micro-batch by
micro-batch gives the whole batch's loss; the bucketing plan covers every row once within the
budget, with padding under the target on the benchmark's reasoning-like length mix at every
budget, and is the exhaustive optimum on small cases; the deal balances ranks' tokens.

End to end (real processes of tests/_microbatch_script.py, the trainer's own `train_step` on one
fixed rollout batch of a warmed tiny proxy): the update of one optimizer step with micro-batches
equals the update without, for the token, sample and prompt aggregations, in one process (torch
engine) and on 2 gloo ranks under ZeRO 0, 2 and 3, within 1e-5 relative (fp32). Adam's eps is
set to 1 there so the update is proportional to the gradient (see the script).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest
import torch
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy

from trainer.algo.losses import AGGREGATIONS, token_weights
from trainer.loop.microbatch import (
    PADDING_TARGET,
    deal_groups,
    padded_tokens,
    padding_share,
    plan_micro_batches,
)

SCRIPT = ROOT / "tests" / "_microbatch_script.py"
AGGS = ("token", "sample", "prompt")


# -- units -------------------------------------------------------------------------------------

def _batch(seed: int = 0, rows: int = 12, T: int = 9):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (rows,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    mask[3, 0] = 0.0  # a token outside the loss (interruption text)
    terms = torch.randn((rows, T), generator=g, dtype=torch.float64)
    group = torch.arange(rows) // 4
    return terms, mask, group


@pytest.mark.parametrize("aggregation", AGGS)
def test_token_weights_reproduce_the_aggregation_and_split_exactly(aggregation):
    terms, mask, group = _batch()
    whole = AGGREGATIONS.get(aggregation)(terms, mask, group)
    w = token_weights(aggregation, mask, group)
    assert float((w * terms).sum()) == pytest.approx(float(whole), rel=1e-12)
    # Micro-batches that cut prompt groups apart still add up to the whole batch's loss ...
    parts = [[0, 5, 11], [1, 2], [3, 4, 6, 7, 8], [9, 10]]
    assert sum(float((w[p] * terms[p]).sum()) for p in parts) == pytest.approx(float(whole),
                                                                                rel=1e-12)
    # ... which plain accumulation (the mean of each micro-batch's own aggregation, with its
    # own denominators) does not.
    local = sum(float(AGGREGATIONS.get(aggregation)(terms[p], mask[p], group[p]))
                for p in parts) / len(parts)
    assert abs(local - float(whole)) > 1e-3


def _reasoning_lengths(n: int, seed: int, max_len: int = 16384) -> list[tuple[int, int]]:
    """Prompt ~100-600 tokens; completions log-normal (many short answers), a tail cut at the
    maximum length (truncated samples). Synthetic, as the padding share needs only lengths."""
    rng = random.Random(seed)
    out = []
    for _ in range(n // 16):
        p = rng.randint(100, 600)
        out += [(p, min(max_len - p, int(rng.lognormvariate(7.5, 1.0)))) for _ in range(16)]
    return out


def test_plan_covers_every_row_once_within_the_budget():
    lengths = _reasoning_lengths(256, seed=1)
    budget = 65536
    plan = plan_micro_batches(lengths, budget, [i // 16 for i in range(len(lengths))])
    assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
    for mb in plan:
        assert padded_tokens([lengths[i] for i in mb]) <= budget or len(mb) == 1
    assert plan_micro_batches(lengths, None) == [list(range(len(lengths)))]
    assert plan_micro_batches([(10, 90)], 50) == [[0]]  # longer than the budget: alone


def _bench_packing():
    """benchmarks/bench_packing.py as a module: the test checks the benchmark's own mix."""
    spec = importlib.util.spec_from_file_location("bench_packing",
                                                  ROOT / "benchmarks" / "bench_packing.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("budget", [16384, 32768, 65536, "share"])
def test_split_keeps_padding_under_ten_percent_of_the_benchmark_mix(budget):
    """64 prompts x 16 samples of the reasoning mix dealt to 8 ranks, as the benchmark does;
    "share": a budget as large as a rank's whole share (greedy filling left 50% there)."""
    bench = _bench_packing()
    lengths = bench.mix("reasoning", 1024, seed=0)
    assert padding_share(lengths, plan_micro_batches(lengths, None), contiguous=False) > 0.5
    for rows in bench._per_rank(lengths, 8):
        b = sum(p + c for p, c in rows) if budget == "share" else budget
        plan = plan_micro_batches(rows, b)
        assert sorted(i for mb in plan for i in mb) == list(range(len(rows)))
        assert all(padded_tokens([rows[i] for i in mb]) <= b for mb in plan)
        assert padding_share(rows, plan) <= PADDING_TARGET < 0.10


def _partitions(items: list[int]):
    """Every set partition of `items` (Bell(7) = 877 for 7 rows)."""
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[head]] + part
        for k in range(len(part)):
            yield part[:k] + [[head] + part[k]] + part[k + 1:]


@pytest.mark.parametrize("seed", range(40))
def test_split_is_the_exhaustive_optimum(seed):
    """Against every set partition (not only runs of sorted rows): the fewest micro-batches
    within the budget whose padding meets the target, and the fewest slots among those."""
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    lengths = [(rng.randint(0, 3), rng.randint(1, 12)) for _ in range(n)]
    budget = rng.randint(5, 40)
    target = rng.choice([0.0, 0.05, 0.2, 0.5, 1.0])
    real = sum(p + c for p, c in lengths)

    def slots(part):
        return sum(padded_tokens([lengths[i] for i in mb]) for mb in part)

    ok = [part for part in _partitions(list(range(n)))
          if all(len(mb) == 1 or padded_tokens([lengths[i] for i in mb]) <= budget
                 for mb in part) and real >= (1 - target) * slots(part)]
    best = min((len(part), slots(part)) for part in ok)
    plan = plan_micro_batches(lengths, budget, max_padding=target)
    assert sorted(i for mb in plan for i in mb) == list(range(n))
    assert all(len(mb) == 1 or padded_tokens([lengths[i] for i in mb]) <= budget for mb in plan)
    assert (len(plan), slots(plan)) == best


def test_deal_balances_tokens_and_deals_each_group_once():
    rng = random.Random(3)
    size = {g: rng.randint(1000, 200_000) for g in range(40)}
    deal = deal_groups(size, 8)
    assert sorted(g for gs in deal for g in gs) == list(range(40))
    load = [sum(size[g] for g in gs) for gs in deal]
    assert max(load) - min(load) <= max(size.values())  # LPT: within one group of even
    assert max(load) / (sum(load) / 8) < 1.15
    assert deal_groups(size, 8) == deal  # every rank computes the same deal
    assert deal_groups({0: 5}, 2) == [[0], []]  # fewer groups than ranks: one rank idles


# -- one optimizer step, with and without micro-batches ----------------------------------------

@pytest.fixture(scope="module")
def cache() -> Path:
    path = session_cache()
    warm_proxy(path, "__import__('_microbatch_script').config('torch', 0, 'token', None)")
    return path


def _launch(engine: str, stage: int, world: int, cache: Path, tmp_path_factory) -> list[dict]:
    work = tmp_path_factory.mktemp(f"mb-{engine}{stage}-{world}")
    launch_ranks(SCRIPT, [engine, str(stage), str(work)], cache, world, timeout=900)
    return [json.loads((work / f"rank{r}.json").read_text()) for r in range(world)]


def _update(out: dict, case: str) -> list[float]:
    return [a - b for a, b in zip(out["cases"][case]["params"], out["before"], strict=True)]


def _rel(a: list[float], b: list[float]) -> float:
    return math.dist(a, b) / math.hypot(*b)


def check_exact(outs: list[dict]) -> None:
    """Per aggregation: micro-batched update == whole-batch update (1e-5 relative), while the
    three aggregations' updates differ (the check can see a wrong weighting)."""
    first = outs[0]
    for agg in AGGS:
        whole, micro = _update(first, f"{agg}/None"), _update(first, f"{agg}/40")
        assert math.hypot(*whole) > 1e-4  # the step moved the weights
        assert _rel(micro, whole) < 1e-5, agg
        m = first["cases"][f"{agg}/40"]["metrics"]
        assert m["train/micro_batches"] >= 3  # really micro-batched
        assert first["cases"][f"{agg}/None"]["metrics"]["train/micro_batches"] == 1
    for a, b in [("token", "sample"), ("token", "prompt"), ("sample", "prompt")]:
        assert _rel(_update(first, f"{a}/40"), _update(first, f"{b}/40")) > 1e-3, (a, b)
    for other in outs[1:]:  # every rank ends with the same weights
        for case in first["cases"]:
            assert other["cases"][case]["params"] == first["cases"][case]["params"], case


@pytest.fixture(scope="module")
def single(cache, tmp_path_factory) -> list[dict]:
    return _launch("torch", 0, 1, cache, tmp_path_factory)


@pytest.mark.slow
def test_micro_batches_match_one_batch_in_one_process(single):
    check_exact(single)


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", [0, 3])  # 2 passes too; CI time spent on the ends
def test_micro_batches_match_one_batch_on_two_zero_ranks(stage, single, cache, tmp_path_factory):
    pytest.importorskip("deepspeed")
    outs = _launch("deepspeed", stage, 2, cache, tmp_path_factory)
    check_exact(outs)
    for agg in AGGS:  # and 2 ranks take the same step as one process
        m = outs[0]["cases"][f"{agg}/40"]["metrics"]
        assert 1.0 <= m["train/rank_tokens_max_over_mean"] < 1.5
        assert _rel(_update(outs[0], f"{agg}/40"), _update(single[0], f"{agg}/None")) < 1e-5
    if stage == 3:
        check_prefetch(outs)


def check_prefetch(outs: list[dict]) -> None:
    """ZeRO-3 prefetches: the trainer tells DeepSpeed where each forward pass begins
    (DeepSpeedEngine.begin_pass), so the coordinator's trace is recorded on the first
    micro-batch, complete from the second on every rank and never invalidated, and from then
    on DeepSpeed's own log shows parameters prefetched in every micro-batch."""
    for agg in AGGS:
        for out in outs:
            passes = out["cases"][f"{agg}/40"]["passes"]
            assert len(passes) >= 3, passes  # one per micro-batch
            assert passes[0]["before"] == "invalid" and passes[0]["after"] == "record", passes
            assert all(p["after"] == "complete" for p in passes[1:]), passes
            assert all(p["before"] == "complete" for p in passes[2:]), passes  # never invalidated
        rank0 = outs[0]["cases"][f"{agg}/40"]["passes"]  # DeepSpeed logs rank 0's fetches only
        assert rank0[0]["prefetched"] == 0 and rank0[0]["on_demand"] > 0, rank0  # recording
        assert all(p["prefetched"] > 0 for p in rank0[1:]), rank0
        print(f"ZeRO-3 passes ({agg}): " + ", ".join(
            f"{p['before']}->{p['after']} prefetched {p['prefetched']} on demand {p['on_demand']}"
            for p in rank0))
