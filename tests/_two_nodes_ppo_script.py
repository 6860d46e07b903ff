"""One rank of a 2-"node" ppo_off_policy job on the vllm backend (tests/test_two_nodes.py): two
Slurm-style tasks, each its node's local rank 0 (SLURM_NODEID 0 and 1), in the vllm venv, on
one host. Runs `trainer.loop.train.run` as a study job does and writes what this rank saw:
the feeders, its engine, its own share of each big generation (prompt ids, the versions its
tokens were sampled with, read where the source hands it to the join), each step's batch as
the loop trains on it, the eval chunks it decoded, and its weights.
Usage: .venv-vllm/bin/python tests/_two_nodes_ppo_script.py STEPS WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

K = 2  # PPO-off-policy-2: a big generation of 2 steps' prompts, then 2 steps on it


def config(steps: int):
    """The job's config: the proxy, vLLM, ppo_off_policy k=2, 2 prompts a step (a big
    generation of 4, dealt 2 to each node), eval at 0 and at the end."""
    from _trainer_util import config as train_config
    from _trainer_util import tiny

    return train_config(tiny(
        rollout={"backend": "vllm", "prompts_per_step": 2, "generations_per_prompt": 2,
                 "max_new_tokens": 8},
        off_policy={"mode": "ppo_off_policy", "k": K},
        data={"zero_variance_filter": False},  # every step trains: the weights move
        eval={"every_steps": steps, "num_prompts": 4, "samples_per_prompt": 2},
        budget={"steps": steps}, checkpoint={"every_steps": steps}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trainer.generation import eval_service, offpolicy
    from trainer.loop import final_eval
    from trainer.loop import train as loop

    steps, work = int(sys.argv[1]), Path(sys.argv[2])
    rank = int(os.environ["SLURM_PROCID"])
    eval_service.cpu_queue_limit = lambda: 1  # every eval prompt its own chunk
    built, shares, batches, evals = {}, [], [], []
    orig_start, orig_join, orig_batch = loop.start, offpolicy.step_batch, loop.next_batch
    orig_decode = final_eval._decode

    def keep(*a, **k):  # the run, to read its final weights
        built["run"] = orig_start(*a, **k)
        return built["run"]

    def join(mine, ranks, stop, how):  # this feeder's own share, as it enters the join
        if isinstance(mine, offpolicy.Batch):
            shares.append({"prompts": mine.prompt_ids,
                           "versions": sorted({v for vs in mine.rollout.versions for v in vs})})
        return orig_join(mine, ranks, stop, how)

    def joined(source, step):  # the step's batch as every rank trains on it
        built["source"] = source
        b = orig_batch(source, step)
        batches.append(b.prompt_ids)
        return b

    def decode(svc, step, mine, *rest):  # the eval chunks this node's engine decodes
        evals.append({"step": step, "chunks": [a for a, _, _ in mine]})
        return orig_decode(svc, step, mine, *rest)

    loop.start, offpolicy.step_batch, loop.next_batch = keep, join, joined
    final_eval._decode = decode
    loop.run(config(steps), work / "run")
    run, src = built["run"], built["source"]
    params = [float(x) for p in run.parts.engine.model.parameters()
              for x in p.detach().flatten()[:20]]
    out = {"rank": rank, "step": run.state.step, "feeders": list(src.feeders.ranks),
           "engine": type(src.gen).__name__ if src.gen is not None else None,
           "shares": shares, "batches": batches, "evals": evals, "params": params}
    (work / f"rank{rank}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
