"""One rank of a 2-process pipeline-mode job on CPU (gloo), launched by
tests/test_pipeline_stream.py with Slurm-style variables (as `srun` sets them).

Runs `trainer.loop.train.run` as a study job does, in off_policy.mode=pipeline, and writes what the
test checks: this rank's step and parameters, and whether this rank ran a generator (only
rank 0 feeds the stream; the loop broadcasts its batch).
Usage: python tests/_pipeline_rank_script.py STEPS WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


def config(steps: int):
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0, "model": {"proxy": TINY_PROXY}, "precision": {"dtype": "fp32"},
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        "rollout": {"prompts_per_step": 4, "generations_per_prompt": 4, "max_new_tokens": 6},
        "length": {"control": "none"},
        "data": {"zero_variance_filter": False},  # every step trains, so every step has a lag
        "off_policy": {"mode": "pipeline", "k": 2, "groups_per_call": 2},
        "engine": {"type": "torch", "device": "cpu", "threads": 1},
        "optim": {"lr": 3e-3, "warmup_steps": 0},
        "eval": {"every_steps": 1, "num_prompts": 8, "samples_per_prompt": 2},
        "checkpoint": {"every_steps": 1}, "budget": {"steps": steps},
    })


if __name__ == "__main__":
    import torch.distributed as dist

    from trainer.loop import train as loop

    steps, work = int(sys.argv[1]), Path(sys.argv[2])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    built, generators = {}, []
    orig, orig_start = loop.start, threading.Thread.start

    def keep(*a, **k):  # hold on to the run to read its final weights
        built["run"] = orig(*a, **k)
        return built["run"]

    def start(self):  # observe which threads this rank starts
        generators.append(self.name)
        orig_start(self)

    loop.start = keep
    threading.Thread.start = start
    loop.run(config(steps), work / "run")
    run = built["run"]
    params = [float(x) for p in run.parts.engine.model.parameters()
              for x in p.detach().flatten()[:50]]
    out = {"rank": rank, "world": dist.get_world_size(), "step": run.state.step, "params": params,
           "generator_threads": generators.count("ablate-generator")}
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
