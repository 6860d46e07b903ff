"""One rank of a 2-"node" pipeline-mode job on the vllm backend (tests/test_two_nodes.py):
two Slurm-style tasks, each node's local rank 0 (SLURM_NODEID 0 and 1, SLURM_LOCALID 0), in
the vllm venv, on one host. Runs `trainer.loop.train.run` as a study job does and writes what this
rank saw: whether it ran a generator and which engine, its own share of each step (prompt
ids, the versions its tokens were sampled with), each step's joined batch, its weights.
Usage: .venv-vllm/bin/python tests/_two_nodes_script.py STEPS WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

def config(steps: int):
    """The job's config: the proxy, vLLM, PipelineRL-1, eval at 0 and at the end; 3 prompts a
    step, dealt 2 to node 0 and 1 to node 1 (trainer/plan/placement.py shares)."""
    from _trainer_util import config as train_config
    from _trainer_util import tiny

    return train_config(tiny(
        rollout={"backend": "vllm", "prompts_per_step": 3, "generations_per_prompt": 2,
                 "max_new_tokens": 8},
        off_policy={"mode": "pipeline", "k": 1},
        data={"zero_variance_filter": False},  # every step trains: the weights move
        eval={"every_steps": steps, "num_prompts": 8, "samples_per_prompt": 2},
        budget={"steps": steps}, checkpoint={"every_steps": steps}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch.distributed as dist

    from trainer.loop import train as loop
    from trainer.generation import offpolicy

    steps, work = int(sys.argv[1]), Path(sys.argv[2])
    rank = int(os.environ["SLURM_PROCID"])
    cfg = config(steps)
    built, threads, shares, batches = {}, [], [], []
    orig_init, orig_start = loop.start, threading.Thread.start
    orig_next, orig_batch = offpolicy.Pipeline.next, loop.next_batch

    def keep(*a, **k):  # the run, to read its final weights
        built["run"] = orig_init(*a, **k)
        return built["run"]

    def start(self):  # which threads this rank starts
        threads.append(self.name)
        orig_start(self)

    def share(self, version):  # this rank's own part of the step (None: not a feeder)
        b = orig_next(self, version)
        built["source"] = self
        if b is not None:
            shares.append({"step": version, "prompts": b.prompt_ids,
                           "versions": sorted({v for vs in b.rollout.versions for v in vs})})
        return b

    def joined(source, step):  # the step's batch as every rank trains on it
        b = orig_batch(source, step)
        batches.append(b.prompt_ids)
        return b

    loop.start, threading.Thread.start = keep, start
    offpolicy.Pipeline.next, loop.next_batch = share, joined
    loop.run(cfg, work / "run")
    run, src = built["run"], built["source"]
    params = [float(x) for p in run.parts.engine.model.parameters()
              for x in p.detach().flatten()[:20]]
    out = {"rank": rank, "step": run.state.step, "generators": threads.count("ablate-generator"),
           "engine": type(src.gen).__name__ if src.gen is not None else None,
           "feeders": list(src.feeders.ranks), "shares": shares, "batches": batches,
           "params": params}
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
