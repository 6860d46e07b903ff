"""engine.collective_timeout_minutes: the process group a multi-rank run joins waits that long
in a collective (rank 0's lone vllm eval keeps the other ranks at a barrier, and torch's 30
minutes can be too short for a paper-scale eval), and the knob leaves the run id alone.

Two real ranks (gloo, torchrun-style variables) join through the trainer's own entry
(trainer.loop.setup.setup_distributed) and report their group's timeout as the gloo backend
holds it (a private torch attribute: no public getter exists)."""

from __future__ import annotations

import pytest

import os
import socket
import subprocess
import sys
from pathlib import Path

from ablate.studies.expand import run_id_of
from trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]

RANK_SCRIPT = """
import torch, torch.distributed as dist
from trainer.config import TrainConfig
from trainer.loop.setup import setup_distributed
cfg = TrainConfig.model_validate({"engine": {"device": "cpu", "collective_timeout_minutes": 3}})
setup_distributed(cfg)
pg = dist.distributed_c10d._get_default_group()
seconds = pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
dist.barrier()
print("TIMEOUT", dist.get_rank(), seconds, flush=True)
import os
os._exit(0)  # as tests/_multirank_util.py leave_ranks: no gloo teardown at exit
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_join_with_the_configured_timeout():
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_SCRIPT], env=env, cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    seen = sorted(line.split()[1:] for out in outs for line in out.splitlines()
                  if line.startswith("TIMEOUT"))
    assert seen == [["0", "180.0"], ["1", "180.0"]], outs


def test_default_is_two_hours_and_not_part_of_the_run_id():
    cfg = TrainConfig()
    assert cfg.engine.collective_timeout_minutes == 120
    tree = cfg.model_dump(mode="json")
    longer = TrainConfig.model_validate(
        {**tree, "engine": {**tree["engine"], "collective_timeout_minutes": 600}})
    assert run_id_of(longer.model_dump(mode="json")) == run_id_of(tree)
    other = TrainConfig.model_validate({**tree, "engine": {**tree["engine"], "threads": 3}})
    assert run_id_of(other.model_dump(mode="json")) != run_id_of(tree)  # the check can fail
