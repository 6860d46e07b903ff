"""One rank of a 2-rank ppo_off_policy job on the vllm backend (tests/test_one_engine.py),
launched with Slurm-style variables in the vllm venv.

Builds the trainer's own run (`trainer.loop.train.start`) and its rollout source exactly as
`trainer.loop.train.run` does, then takes 3 steps' batches the way the loop does (rank 0's
batch broadcast to every rank) and writes the generator this rank holds (none, or the
engine host's) and a digest of each batch.
Usage: .venv-vllm/bin/python tests/_one_engine_script.py WORKDIR
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

def job_config():
    """The job's config: the proxy with vLLM, ppo_off_policy k=2, the engine in rank 0's engine
    host (trainer/generation/host.py: generate() calls and the pushes cross it)."""
    from _trainer_util import config, tiny

    return config(tiny(rollout={"backend": "vllm", "prompts_per_step": 4,
                                "generations_per_prompt": 2, "vllm": {"client": "process"}},
                       off_policy={"mode": "ppo_off_policy", "k": 2}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch.distributed as dist

    from trainer.dist.groups import broadcast_object
    from trainer.loop.setup import setup_distributed
    from trainer.loop.train import start
    from trainer.torch_axes import MODES

    work = Path(sys.argv[1])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    cfg = job_config()
    setup_distributed(cfg)
    (work / "run").mkdir(parents=True, exist_ok=True)
    run = start(cfg, work / "run")
    source = MODES.get("ppo_off_policy")(run.ctx)
    digests = []
    for step in range(3):  # steps 0-1 from one big generation, step 2 from a new one
        b = broadcast_object(source.next(step))
        digests.append(hashlib.sha1(repr((b.prompt_ids, b.rollout.tokens)).encode()).hexdigest())
    engine = None if source.gen is None else type(source.gen).__name__
    source.close()
    (work / f"rank{rank}.json").write_text(json.dumps({"engine": engine, "digests": digests}))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
