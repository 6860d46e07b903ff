"""One rank of a 2-rank gloo job run through trainer.loop.train.run, where rank 1 fails while
rank 0 waits in a collective (tests/test_abort.py). Only the run's body is replaced (`start`
and `train`): the start-up, process group, fail-fast watchdog and status writing are the
trainer's own."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

import trainer.loop.train as loop
from trainer.config import TrainConfig


class _FailingRun:  # what trainer.loop.train.start returns, as far as run() reads it
    def __init__(self, config, run_dir, entry_s: float = 0.0) -> None:
        self.state = SimpleNamespace(step=3)


def _train(run: _FailingRun) -> None:
    if dist.get_rank() == 1:
        time.sleep(1.0)
        print(f"RAISED {time.time():.3f}", flush=True)
        try:  # the shape of vLLM's start-up failure: a wrapper around the real cause
            raise ValueError("Free memory on device cuda:0 (1.2/79.1 GiB) is less than "
                             "desired GPU memory utilization (0.9, 71.2 GiB)")
        except ValueError as e:
            raise RuntimeError("Engine core initialization failed. See root cause "
                               "above.") from e
    dist.barrier()  # rank 0: waits for a peer that will never come (timeout: 120 min)
    print("UNREACHED", flush=True)


loop.start, loop.train = _FailingRun, _train
cfg = TrainConfig.model_validate({"engine": {"device": "cpu"}})
try:
    loop.run(cfg, Path(sys.argv[1]))
except RuntimeError:
    # Stay alive, as a rank stuck in NCCL teardown or an engine's shutdown does: the peers
    # must not depend on this process's exit (gloo would see its socket close; NCCL does not),
    # and trainer.dist.abort.exit_soon must end it anyway.
    time.sleep(300)
