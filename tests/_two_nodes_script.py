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

def config(steps: int, every: int | None = None):
    """The job's config: the proxy, vLLM, PipelineRL-1, eval at 0, every `every` steps
    (default: only) and at the end; 3 prompts a step, dealt 2 to node 0 and 1 to node 1
    (trainer/plan/placement.py shares); each node's engine in its feeder's engine host, as
    `rollout.vllm.client: auto` runs it on GPU nodes (trainer/generation/host.py)."""
    from _trainer_util import config as train_config
    from _trainer_util import tiny

    return train_config(tiny(
        rollout={"backend": "vllm", "prompts_per_step": 3, "generations_per_prompt": 2,
                 "max_new_tokens": 8, "vllm": {"client": "process"}},
        off_policy={"mode": "pipeline", "k": 1},
        data={"zero_variance_filter": False},  # every step trains: the weights move
        eval={"every_steps": every or steps, "num_prompts": 8, "samples_per_prompt": 2},
        budget={"steps": steps}, checkpoint={"every_steps": steps}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch.distributed as dist

    from _multirank_util import watch_pipeline

    from trainer.loop import train as loop

    steps, work = int(sys.argv[1]), Path(sys.argv[2])
    every = int(sys.argv[3]) if len(sys.argv) > 3 else None
    # STOP_EVAL: the step whose eval rank 0 cuts after one chunk of its share (a stop signal
    # mid-eval, as a job's time limit sends it); the next attempt resumes it
    stop_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
    attempt = f".{sys.argv[5]}" if len(sys.argv) > 5 else ""
    rank = int(os.environ["SLURM_PROCID"])
    cfg = config(steps, every)
    from trainer.dist import preempt
    from trainer.generation import eval_service
    from trainer.loop import final_eval

    # every prompt its own eval chunk (the CPU queue limit chunks are cut by), so each node's
    # share has several and a stop after one leaves the eval part done
    eval_service.cpu_queue_limit = lambda: 1
    evals, real_decode = [], final_eval._decode

    def decode(svc, step, mine, *rest):  # observed; at `stop_at` rank 0 stops after a chunk
        evals.append({"step": step, "chunks": [a for a, _, _ in mine]})
        if step == stop_at and rank == 0:
            real_decode(svc, step, mine[:1], *rest)
            preempt.request()
            return None
        return real_decode(svc, step, mine, *rest)

    final_eval._decode = decode
    built, threads, shares, batches = {}, [], [], []
    orig_init, orig_start = loop.start, threading.Thread.start

    def keep(*a, **k):  # the run, to read its final weights
        built["run"] = orig_init(*a, **k)
        return built["run"]

    def start(self):  # which threads this rank starts
        threads.append(self.name)
        orig_start(self)

    loop.start, threading.Thread.start = keep, start
    watch_pipeline(built, shares, batches)
    loop.run(cfg, work / "run")
    run, src = built["run"], built["source"]
    params = [float(x) for p in run.parts.engine.model.parameters()
              for x in p.detach().flatten()[:20]]
    out = {"rank": rank, "step": run.state.step, "generators": threads.count("ablate-generator"),
           "engine": type(src.gen).__name__ if src.gen is not None else None,
           "feeders": list(src.feeders.ranks), "shares": shares, "batches": batches,
           "params": params, "evals": evals}
    (work / f"rank{rank}{attempt}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
