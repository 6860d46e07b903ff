"""One rank of a 2-process DeepSpeed trainer run on CPU (gloo), launched by
tests/test_deepspeed.py with Slurm-style environment variables (as `srun` would set them).

It runs real trainer steps (the trainer's own loop, rollout, rewards, loss) with
engine.type=deepspeed, then writes this rank's full parameter vector (ZeRO-3 partitions
gathered) so the test can check that ranks agree and that every ZeRO stage trains alike.
Usage: python tests/_deepspeed_script.py STAGE DTYPE WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def config(stage: int, dtype: str):
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0,
        "model": {"proxy": TINY_PROXY},
        "precision": {"dtype": dtype},
        # Enough data for the warm-up to reach a held-out pass rate above 0.02 (~200 steps).
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        "rollout": {"prompts_per_step": 4, "generations_per_prompt": 4, "max_new_tokens": 6},
        "length": {"control": "none"},
        "off_policy": {"mode": "ppo_off_policy", "k": 1},
        "engine": {"type": "deepspeed", "zero_stage": stage, "device": "cpu", "threads": 1},
        "optim": {"lr": 3e-3, "warmup_steps": 0},
        "eval": {"every_steps": 3, "num_prompts": 8, "samples_per_prompt": 2},
        "budget": {"steps": 3},
    })


def flat_params(model):
    """All parameters as one fp32 list; ZeRO-3 partitions are gathered (a collective)."""
    from contextlib import nullcontext

    import deepspeed
    import torch

    params = list(model.parameters())
    zero3 = hasattr(params[0], "ds_id")
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None) if zero3 else nullcontext():
        return torch.cat([p.detach().float().reshape(-1) for p in params]).tolist()


if __name__ == "__main__":
    from trainer import rundir
    from trainer.loop.train import start, train

    stage, dtype, work = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    rank = int(os.environ["SLURM_PROCID"])
    cfg = config(stage, dtype)
    run_dir = work / "run"  # ONE run dir shared by both ranks, as in a real multi-rank job
    run_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        rundir.write_config(run_dir, cfg)
    run = start(cfg, run_dir)
    train(run)
    import torch.distributed as dist

    from trainer.dist.groups import broadcast_object

    out = {"broadcast": broadcast_object("from-rank-0" if rank == 0 else "other"), "rank": rank, "world": dist.get_world_size(), "backend": dist.get_backend(),
           "step": run.state.step, "params": flat_params(run.parts.engine.model),
           "status": rundir.read_status(run_dir).get("state"),
           "metrics_steps": [m["step"] for m in rundir.read_metrics(run_dir)],
           "lr": [m["train/lr"] for m in rundir.read_metrics(run_dir) if "train/lr" in m]}
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
