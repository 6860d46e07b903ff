"""gpu_hours counts every device the job holds, generation GPUs included (issue 23 item 6), so
variants with different off-policy modes on one job shape share one x axis."""

from __future__ import annotations

import pytest
from _trainer_util import config, metrics, tiny

import trainer
from trainer.dist.binding import job_topology
from trainer.plan.topology import JobShape, topology


def held(mode: str, nodes: int, ranks: int, gpus: int) -> int:
    """Devices a job of `nodes` x `ranks` processes on `gpus`-GPU nodes holds (vLLM)."""
    c = config(tiny(off_policy={"mode": mode, "k": 2}, rollout={"backend": "vllm"}))
    return topology(c, JobShape(nodes=nodes, ranks_per_node=ranks, gpus_per_node=gpus)).devices


def test_separate_generation_gpus_are_counted():
    # Pipeline with vLLM: 4 of a node's 8 GPUs generate, 4 train; every node's count.
    assert held("pipeline", nodes=1, ranks=4, gpus=8) == 8
    assert held("pipeline", nodes=2, ranks=4, gpus=8) == 16
    # One GPU shared by generation and training is one GPU.
    assert held("pipeline", nodes=1, ranks=1, gpus=1) == 1
    # ppo_off_policy splits the nodes alike (4 generate, 4 train), taking turns.
    assert held("ppo_off_policy", nodes=1, ranks=4, gpus=8) == 8
    assert held("ppo_off_policy", nodes=2, ranks=4, gpus=8) == 16
    # GPUs the job holds count even when no rank or engine uses them.
    assert held("pipeline", nodes=2, ranks=1, gpus=8) == 16
    assert held("ppo_off_policy", nodes=1, ranks=2, gpus=8) == 8
    # CPU: one device per process.
    assert held("pipeline", nodes=1, ranks=2, gpus=0) == 2


@pytest.mark.parametrize("world", [1, 4])
def test_off_policy_modes_of_one_job_shape_share_the_x_axis(world):
    """One node with 8 GPUs, as the trainer reads it from the launcher's variables: with vLLM
    both modes run ranks on the node's training GPUs only (`world` of them) and engines on
    its generation GPUs. Both hold 8 GPUs."""
    def devices(mode: str, ranks: int) -> int:
        env = {"RANK": "0", "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks),
               "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "ABLATE_GPU_MEMORY_GIB": ""}
        c = config(tiny(off_policy={"mode": mode, "k": 2}, rollout={"backend": "vllm"},
                        engine={"type": "torch", "device": "cuda"}))
        return job_topology(c, env).devices

    assert devices("ppo_off_policy", world) == 8
    assert devices("pipeline", world) == 8  # 1 rank: 1 + 4 GPUs used, 8 held


@pytest.mark.slow
def test_runs_of_two_modes_share_the_x_axis_on_cpu(tmp_path):
    """Run level, on the CPU proxy (one process = one device): both modes' metrics lines
    report gpu_hours = wall x 1 device, the same x axis."""
    for mode in ("pipeline", "ppo_off_policy"):
        c = config(tiny(off_policy={"mode": mode, "k": 2}, budget={"steps": 2}))
        trainer.run(c, tmp_path / mode)
        last = metrics(tmp_path / mode)[-1]
        assert last["gpu_hours"] > 0
        assert last["gpu_hours"] == pytest.approx(last["time/wall_s"] / 3600, rel=1e-9)
