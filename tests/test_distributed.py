"""trainer/dist/groups.py: process-group settings from Slurm / torchrun environments, and the
DeepSpeed config built from a TrainConfig. (The generation/training GPU split is
tests/test_topology.py's.)"""

from __future__ import annotations

import shutil

import pytest

from trainer.config import TrainConfig
from trainer.dist.groups import default_port, first_host, read_env


def test_slurm_env_multi_node():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "SLURM_JOB_ID": "123456"}
    d = read_env(env)
    assert (d.rank, d.world_size, d.local_rank, d.local_world_size) == (5, 8, 1, 4)
    assert d.launcher == "slurm"
    assert d.master_addr == "gpu07"  # first host, zero padding kept
    assert d.master_port == default_port("123456")
    assert read_env({**env, "MASTER_PORT": "31000", "MASTER_ADDR": "head"}).master_port == 31000


def test_torchrun_env_wins_over_slurm():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1",
           "MASTER_PORT": "29999", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    d = read_env(env)
    assert (d.rank, d.world_size, d.master_addr, d.master_port, d.launcher) == \
        (1, 2, "10.0.0.1", 29999, "torchrun")


def test_single_process_default():
    d = read_env({})
    assert (d.rank, d.world_size, d.launcher) == (0, 1, "single")


@pytest.mark.parametrize("nodelist,first", [
    ("node1", "node1"), ("gpu[01-04,07]", "gpu01"), ("a[3,5],b1", "a3"), ("x1,x2", "x1"),
])
def test_first_host(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed")
def test_first_host_uses_scontrol_expansion():
    assert first_host("n[009-011]") == "n009"


def test_deepspeed_config_follows_train_config():
    pytest.importorskip("torch")
    from trainer.engine_deepspeed import deepspeed_config

    c = TrainConfig.model_validate({"engine": {"type": "deepspeed", "zero_stage": 3},
                                    "optim": {"grad_clip": 0.5}, "precision": {"dtype": "bf16"}})
    ds = deepspeed_config(c, world_size=4, on_gpu=False)
    assert ds["zero_optimization"]["stage"] == 3 and ds["bf16"]["enabled"]
    assert ds["gradient_clipping"] == 0.5 and ds["train_batch_size"] == 4
    assert ds["zero_optimization"]["stage3_param_persistence_threshold"] == 0  # CPU: all sharded
    assert "stage3_param_persistence_threshold" not in deepspeed_config(c, 4)["zero_optimization"]
    c2 = TrainConfig.model_validate({"engine": {"type": "deepspeed", "zero_stage": 1},
                                     "precision": {"dtype": "fp32"}})
    assert not deepspeed_config(c2, 1)["bf16"]["enabled"]


def test_slurm_gpu_profile_is_valid():
    """sweeps/slurm_gpu.yaml follows the studies' profile schema: one rank per training GPU
    of each run's split (tasks_per_node auto), and its setup lines point the jobs at the
    pre-filled HF cache and make a dead NCCL peer end the job."""
    from pathlib import Path

    from ablate.studies.launch.profile import load_profile

    p = load_profile(Path(__file__).resolve().parents[1] / "sweeps" / "slurm_gpu.yaml")
    assert p.executor == "slurm"
    assert p.slurm.gpus_per_node > 0 and p.slurm.tasks_per_node == "auto"
    assert p.slurm.nodes >= 2
    exports = [line.split()[1].split("=")[0] for line in p.slurm.setup
               if line.startswith("export ")]
    assert {"HF_HOME", "HF_HUB_OFFLINE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"} <= set(exports)


def test_nccl_error_handling_is_set_where_the_group_starts_unless_the_job_set_it():
    """torch 2.13 reads TORCH_NCCL_ASYNC_ERROR_HANDLING, then its deprecated name
    NCCL_ASYNC_ERROR_HANDLING (ProcessGroupNCCL.hpp:64-69): 1 tears a failing rank down."""
    from trainer.dist.groups import nccl_error_handling

    env: dict = {}
    nccl_error_handling(env)
    assert env == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    for mine in ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, {"NCCL_ASYNC_ERROR_HANDLING": "0"}):
        env = dict(mine)
        nccl_error_handling(env)
        assert env == mine  # the job's own choice stands


@pytest.mark.deepspeed
def test_zero3_pipeline_hf_is_refused_with_a_clear_message():
    pytest.importorskip("deepspeed")
    from trainer.engine_deepspeed import make_deepspeed_engine

    c = TrainConfig.model_validate({"engine": {"type": "deepspeed", "zero_stage": 3},
                                    "off_policy": {"mode": "pipeline"}})
    with pytest.raises(ValueError, match="needs rollout.backend: vllm"):
        make_deepspeed_engine(c, model=None)
