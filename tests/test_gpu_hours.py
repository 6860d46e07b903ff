"""gpu_hours counts every device the job holds, generation GPUs included (issue 23 item 6), so
variants with different off-policy modes on one job shape share one x axis."""

from __future__ import annotations

import pytest
import torch
from _trainer_util import config, metrics, tiny

import trainer
from trainer.devices import devices_held, job_devices
from trainer.dist.groups import GpuSplit, split_gpus


def test_separate_generation_gpus_are_counted():
    split = GpuSplit(generation=(0, 1), training=(2, 3, 4, 5, 6, 7))
    assert devices_held("cuda", world=6, nodes=1, split=split) == 8
    assert devices_held("cuda", world=12, nodes=2, split=split) == 16  # every node's
    # Today's pipeline layout: 8 ranks on a node's 4 training GPUs, 4 generation GPUs.
    assert devices_held("cuda", world=8, nodes=1, split=split_gpus(8)) == 8
    # One GPU shared by generation and training is one GPU.
    assert devices_held("cuda", world=1, nodes=1, split=split_gpus(1)) == 1
    # Colocated generation (no split): one GPU per rank. CPU: one device per process.
    assert devices_held("cuda", world=8, nodes=1, split=None) == 8
    # GPUs the job holds count even when no rank or replica uses them.
    assert devices_held("cuda", world=1, nodes=2, split=split, gpus_per_node=8) == 16
    assert devices_held("cuda", world=6, nodes=1, split=None, gpus_per_node=8) == 8
    assert devices_held("cpu", world=2, nodes=1, split=split) == 2


@pytest.mark.parametrize("world", [1, 8])
def test_off_policy_modes_of_one_job_shape_share_the_x_axis(monkeypatch, world):
    """One node with 8 GPUs: on-policy / PPO-off-policy with vLLM colocated run 8 training
    ranks; pipeline with vLLM runs ranks on the training GPUs only (`world` of them: 8 today
    with two per GPU, 1 when a single rank trains) and 4 generation GPUs. All hold 8 GPUs."""
    def devices(mode: str, ranks: int) -> int:
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(ranks))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
        c = config(tiny(off_policy={"mode": mode, "k": 2}, rollout={"backend": "vllm"}))
        return job_devices(c, torch.device("cuda"), ranks, gpus_per_node=8)

    assert devices("ppo_off_policy", 8) == 8
    assert devices("pipeline", world) == 8  # 1 rank: 1 + 4 GPUs used, 8 held
    assert devices("pipeline", 4) == 8


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
