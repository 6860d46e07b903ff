"""One rank of a CPU (gloo) job for tests/test_microbatch.py: one optimizer step of the real
trainer (`trainer.loop.train.train_step`) on ONE fixed rollout batch, once per (aggregation,
micro-batch size), each case on a fresh engine loaded from the same cached proxy.

Writes this rank's parameters before the step (once) and after each case's step, and the step's
metrics, to WORKDIR/rank{R}.json. Usage: python tests/_microbatch_script.py ENGINE STAGE WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

AGGREGATIONS = ("token", "sample", "prompt")
MICRO = (None, 40)  # None: one micro-batch per rank; 40 tokens: 2-3 rows per micro-batch


def config(engine: str, stage: int, aggregation: str, micro: int | None):
    """The tiny proxy; Adam's eps is 1 so the first update is ~lr x gradient (with eps 1e-15 it
    is lr x sign(gradient), and float noise in a near-zero gradient would flip whole steps);
    no weight decay, so the update is the gradient's alone; no zero-variance filter, so groups
    with zero advantage still count in the sample and prompt denominators."""
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0,
        "model": {"proxy": TINY_PROXY},
        "precision": {"dtype": "fp32"},
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        "data": {"zero_variance_filter": False},
        "rollout": {"prompts_per_step": 8, "generations_per_prompt": 4, "max_new_tokens": 6},
        "length": {"control": "none"},
        "off_policy": {"mode": "ppo_off_policy", "k": 1},
        "loss": {"type": "cispo", "aggregation": aggregation},
        "engine": {"type": engine, "zero_stage": stage, "device": "cpu", "threads": 1,
                   "micro_batch_tokens": micro},
        "optim": {"lr": 1e-2, "warmup_steps": 0, "eps": 1.0, "weight_decay": 0.0},
        "eval": {"every_steps": 1, "num_prompts": 8, "samples_per_prompt": 2},
        "checkpoint": {"every_steps": 1},
        "budget": {"steps": 1},
    })


def vary_lengths(ro) -> None:
    """Samples of one prompt of unequal lengths (sample and prompt aggregation then weigh
    tokens differently) and a few tokens outside the loss mask (interruption text)."""
    for i in range(len(ro.tokens)):
        k = max(1, len(ro.tokens[i]) - i % 4)
        for name in ("tokens", "logprobs", "versions", "loss_mask"):
            getattr(ro, name)[i] = list(getattr(ro, name)[i][:k])
        if i % 5 == 0 and k > 1:
            ro.loss_mask[i][0] = 0


def probe_prefetch(run) -> list[dict]:
    """ZeRO-3's pass starts, spied on (the engine's own begin_pass still runs): per forward
    pass, the coordinator's trace state before and after DeepSpeed's reset_step, and how many
    parameters DeepSpeed's own debug log says it prefetched ("-prefetch: ...",
    deepspeed/runtime/zero/partitioned_param_coordinator.py:481-483) or fetched on demand
    ("-fetch: ...", 379) during the pass. That log is rank 0's only (debug_rank0, 29-31)."""
    import logging

    from deepspeed.utils.logging import logger

    from trainer.models.logprobs import on_pass_start

    engine, passes = run.parts.engine, []

    class Count(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if passes and msg.startswith("-prefetch:"):
                passes[-1]["prefetched"] += 1
            elif passes and msg.startswith("-fetch:"):
                passes[-1]["on_demand"] += 1

    for h in logger.handlers:  # DeepSpeed's own handlers keep printing INFO and up only
        h.setLevel(max(h.level, logging.INFO))
    logger.addHandler(Count(logging.DEBUG))
    logger.setLevel(logging.DEBUG)

    def begin():
        before = engine.trace_state()
        engine.begin_pass()
        passes.append({"before": before, "after": engine.trace_state(), "prefetched": 0,
                       "on_demand": 0})

    on_pass_start(run.parts.body, begin)
    return passes


def main() -> None:
    import torch.distributed as dist
    from _multirank_script import flat_params

    from trainer.dist.groups import broadcast_object
    from trainer.loop.train import start, train_step
    from trainer.torch_axes import MODES

    engine, stage, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    out: dict = {"rank": rank, "cases": {}}
    batch = None
    for agg in AGGREGATIONS:
        for micro in MICRO:
            run = start(config(engine, stage, agg, micro), work / f"run-{agg}-{micro}")
            if batch is None:  # one rollout batch (rank 0's) for every case
                out["before"] = flat_params(run.parts.engine.model)
                source = MODES.get("ppo_off_policy")(run.ctx)
                batch = broadcast_object(source.next(0))
                source.close()
                # A tiny proxy can miss every answer of a batch (no advantage, no gradient):
                # vary the reward through its length-penalty term, the same on every rank.
                ro = batch.rollout
                ro.penalty = [0.1 * ((7 * i) % 5) for i in range(len(ro.penalty))]
                vary_lengths(ro)
            passes = probe_prefetch(run) if run.parts.zero3 else None
            train_step(run, batch)
            out["cases"][f"{agg}/{micro}"] = {
                "params": flat_params(run.parts.engine.model),
                "metrics": dict(run.state.window.sums),  # one step: its statistics
                "passes": passes}
    out["world"] = dist.get_world_size() if dist.is_initialized() else 1
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    if dist.is_initialized():
        from _multirank_util import leave_ranks
        leave_ranks()  # results written: no C++ teardown


if __name__ == "__main__":
    main()
