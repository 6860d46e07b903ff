"""One rank of a 2-process trainer job on CPU (gloo) sharing ONE run dir, launched by
tests/test_multirank.py with Slurm-style variables (as `srun` sets them).

Runs the public entry point `trainer.loop.train.run(config, run_dir)` exactly as a study job does, then
writes this rank's full parameter vector (ZeRO-3 shards gathered) for the test to compare.
Usage: python tests/_multirank_script.py ENGINE STAGE STEPS PROMPTS WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def config(engine: str, stage: int, steps: int, prompts: int = 5):
    """prompts=5: an odd number of groups, so the two ranks get unequal shares. prompts=1 (and
    no zero-variance filter): rank 1 never has a group and always takes the zero-weighted
    step that keeps its collectives in line with rank 0's."""
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0,
        "model": {"proxy": TINY_PROXY},
        "precision": {"dtype": "fp32"},  # engines compare exactly (DeepSpeed casts for bf16)
        # Enough data for the warm-up to reach a held-out pass rate above 0.02 (~200 steps).
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        # No zero-variance filter: every group trains, so step 1 always has an update to
        # compare whatever the sampled rewards are (with it, a step-1 batch whose 5 groups all
        # got one reward each had no loss at all: seen after eval got its own seed stream).
        "data": {"zero_variance_filter": False},
        "rollout": {"prompts_per_step": prompts, "generations_per_prompt": 4, "max_new_tokens": 6},
        "length": {"control": "none"},
        "off_policy": {"mode": "ppo_off_policy", "k": 1},
        "engine": {"type": engine, "zero_stage": stage, "device": "cpu", "threads": 1},
        "optim": {"lr": 3e-3, "warmup_steps": 0},
        "eval": {"every_steps": 1, "num_prompts": 8, "samples_per_prompt": 2},
        "checkpoint": {"every_steps": 1},
        "budget": {"steps": steps},
    })


def flat_params(model) -> list[float]:
    from contextlib import nullcontext

    import torch

    params = list(model.parameters())
    ctx = nullcontext()
    if hasattr(params[0], "ds_id"):
        import deepspeed

        ctx = deepspeed.zero.GatheredParameters(params, modifier_rank=None)
    with ctx:
        return torch.cat([p.detach().float().reshape(-1) for p in params]).tolist()


if __name__ == "__main__":
    import torch.distributed as dist

    from trainer.loop import train as loop

    engine, stage, steps, prompts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    work = Path(sys.argv[5])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    built = {}
    orig = loop.start

    def keep(*a, **k):  # hold on to the run to read its final weights
        built["run"] = orig(*a, **k)
        return built["run"]

    loop.start = keep
    loop.run(config(engine, stage, steps, prompts), work / "run")
    run = built["run"]
    multi = dist.is_initialized()
    out = {"rank": rank, "world": dist.get_world_size() if multi else 1, "step": run.state.step,
           "params": flat_params(run.parts.engine.model)}
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    if multi:
        from _multirank_util import leave_ranks
        leave_ranks()  # results written: no C++ teardown
