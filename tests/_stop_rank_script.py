"""One rank of a 2-process trainer job on CPU (gloo) that a stop signal reaches on rank 1 only,
inside step 3's update; launched by tests/test_stop_ranks.py with Slurm-style variables (as
`srun` sets them).

In one process, three runs of the public entry point `trainer.run`: the job uninterrupted
(WORKDIR/straight), the same job stopped (WORKDIR/run: rank 1 sends itself USR2 right after
its first micro-batch's forward of step 3; rank 0 gets no signal and must learn of it in the
ranks' agreement before the next micro-batch), then its resume (a new attempt, as the
requeued job would run it). Writes each rank's view of the stop to WORKDIR/rank<r>.json.
Usage: python tests/_stop_rank_script.py ENGINE STAGE WORKDIR
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def config(engine: str, stage: int):
    """Eval and checkpoint at 0 and 4 only (step 2, the one the stop falls back to, is saved
    by the stop); ~12-token rows, 2 per 32-token micro-batch: ~5 micro-batches per rank."""
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0,
        "model": {"proxy": TINY_PROXY},
        "precision": {"dtype": "fp32"},
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        "data": {"zero_variance_filter": False},  # every step trains: an update to stop in
        "rollout": {"prompts_per_step": 5, "generations_per_prompt": 4, "max_new_tokens": 6},
        "length": {"control": "none"},
        "off_policy": {"mode": "ppo_off_policy", "k": 1},
        "engine": {"type": engine, "zero_stage": stage, "device": "cpu", "threads": 1,
                   "micro_batch_tokens": 32},
        "optim": {"lr": 3e-3, "warmup_steps": 0},
        "eval": {"every_steps": 4, "num_prompts": 8, "samples_per_prompt": 2},
        "checkpoint": {"every_steps": 10_000},
        "budget": {"steps": 4},
    })


def signal_in_update(rank: int, step: int) -> list[int]:
    """On `rank` only: USR2 to this process after its first forward of step `step`'s update;
    returns the list of that step's forwards (on every rank)."""
    from trainer.dist import preempt
    from trainer.loop.update import PolicyUpdate

    real, ran = PolicyUpdate.forward, []

    def forward(self, ro, b):
        if preempt._current == step:
            ran.append(len(ran))
            if len(ran) == 1 and self.rank == rank:
                os.kill(os.getpid(), signal.SIGUSR2)
        return real(self, ro, b)

    PolicyUpdate.forward = forward
    return ran


if __name__ == "__main__":
    import trainer
    from trainer.dist import preempt
    from trainer.loop.update import PolicyUpdate

    engine, stage, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    rank = int(os.environ["SLURM_PROCID"])
    cfg = config(engine, stage)
    preempt.install(signal.SIGUSR2)  # as the study job's launcher does
    trainer.run(cfg, work / "straight")
    real = PolicyUpdate.forward
    ran = signal_in_update(rank=1, step=3)
    trainer.run(cfg, work / "run")
    seen = {"ran": list(ran), "stopped_at": preempt.stopped_at(),
            "signal_step": preempt.signal_step(), "signal_phase": preempt.signal_phase(),
            "signal_name": preempt.signal_name()}
    PolicyUpdate.forward = real
    preempt.reset()  # the next attempt
    trainer.run(cfg, work / "run")
    seen["resumed_stopped_at"] = preempt.stopped_at()
    (work / f"rank{rank}.json").write_text(json.dumps(seen))
    from _multirank_util import leave_ranks
    leave_ranks()  # results written: no C++ teardown
