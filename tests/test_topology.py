"""trainer/plan/topology.py: the one statement of where a job's ranks and engines go, against
layouts worked out by hand, and the binding of every process of a job read from it.

The topology is the only place the split is decided: the binding (trainer/dist/binding.py),
both plans, the validation and gpu_hours read it, so the tests here check the layout itself,
not that copies agree."""

from __future__ import annotations

import pytest

from trainer.config import TrainConfig
from trainer.dist.binding import plan_binding
from trainer.plan.placement import placement_note, rows_per_engine
from trainer.plan.topology import JobShape, TopologyError, split, split_choices, topology

SMALL = "Qwen/Qwen2.5-0.5B"  # ~1 GiB of bf16 weights: fits one 40/80 GiB GPU


def cfg(mode: str = "pipeline", backend: str = "vllm", model=None, **vllm) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"name_or_path": model}, "off_policy": {"mode": mode},
        "rollout": {"backend": backend, "vllm": vllm},
        "engine": {"type": "deepspeed", "zero_stage": 3} if model else {}})


def shape(nodes=2, ranks=4, gpus=8, gib=None) -> JobShape:
    return JobShape(nodes=nodes, ranks_per_node=ranks, gpus_per_node=gpus, gpu_memory_gib=gib)


def test_pipeline_with_vllm_splits_every_node_in_half_by_default():
    t = topology(cfg(), shape())
    assert t.generation == (0, 1, 2, 3) and t.training == (4, 5, 6, 7)
    assert t.engines == ((0, 1, 2, 3),) and t.tp == 4  # GPU size unknown: one engine of all
    assert t.engine_nodes == 2 and t.own_gpus and t.per_gpu == 1
    assert [t.starts_engines(n, r) for n in (0, 1) for r in (0, 1)] == [True, False, True, False]
    assert t.training_ranks == 8 and t.devices == 16 and t.idle_gpus(0) == t.idle_gpus(1) == 0


def test_the_split_is_an_argument_and_every_choice_is_a_topology():
    c = cfg(tensor_parallel_size=1)
    assert split(c, 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert split(c, 8, generation_gpus=3) == ((0, 1, 2), (3, 4, 5, 6, 7))
    assert split(cfg(generation_gpus=1), 4) == ((0,), (1, 2, 3))  # the config's
    assert split_choices(c, shape()) == [1, 2, 3, 4, 5, 6, 7]
    layouts = {g: topology(c, shape(ranks=8 - g), generation_gpus=g)
               for g in split_choices(c, shape())}
    assert [len(t.engines) for t in layouts.values()] == [1, 2, 3, 4, 5, 6, 7]  # one GPU each
    assert [t.training_ranks for t in layouts.values()] == [14, 12, 10, 8, 6, 4, 2]
    assert {t.devices for t in layouts.values()} == {16}  # the job holds its GPUs either way
    assert split_choices(cfg("ppo_off_policy"), shape()) == []  # nothing to choose
    with pytest.raises(TopologyError, match="generation_gpus=8 on a 8-GPU node.*1..7"):
        split(c, 8, generation_gpus=8)


def test_tensor_parallel_groups_and_replicas_per_node():
    assert topology(cfg(tensor_parallel_size=2), shape()).engines == ((0, 1), (2, 3))
    assert topology(cfg(generation_gpus=2), shape(ranks=6)).engines == ((0, 1),)  # tp: all
    reps = topology(cfg(tensor_parallel_size=1, data_parallel_replicas=3), shape())
    assert reps.engines == ((0,), (1,), (2,)) and reps.engine_nodes == 2  # 3 on each node
    assert reps.idle_gpus(0) == 1 and reps.idle_gpus(1) == 1  # GPU 3 runs nothing
    # The default tp where the GPU size is known: the fewest GPUs that hold the model.
    fits = topology(cfg(model=SMALL), shape(gib=80))
    assert fits.tp == 1 and fits.engines == ((0,), (1,), (2,), (3,))


def test_colocated_and_shared_engines():
    ppo = topology(cfg("ppo_off_policy", data_parallel_replicas=2), shape(ranks=8))
    assert ppo.training == tuple(range(8)) and ppo.generation == ()
    assert ppo.engines == ((0,), (0,)) and ppo.per_gpu == 2  # both on local rank 0's GPU
    assert ppo.engine_nodes == 1 and not ppo.starts_engines(1, 0)  # rank 0 alone starts them
    one_gpu = topology(cfg(), shape(nodes=2, ranks=1, gpus=1))
    assert one_gpu.training == (0,) and one_gpu.engines == ((0,),) and not one_gpu.own_gpus
    assert one_gpu.engine_nodes == 2  # pipeline: every node generates its share
    cpu = topology(cfg(), JobShape(nodes=1, ranks_per_node=2))
    assert cpu.engines == ((),) and cpu.training_ranks == 2 and cpu.devices == 2
    hf = topology(cfg(backend="hf"), shape(ranks=8))
    assert hf.engines == () and hf.training == tuple(range(8)) and hf.devices == 16


@pytest.mark.parametrize("c, message", [
    (cfg(tensor_parallel_size=3), r"tensor_parallel_size=3 does not divide the 4 generation "
                                  r"GPUs per node \(8-GPU nodes\); valid: 1, 2, 4"),
    (cfg(tensor_parallel_size=2, data_parallel_replicas=3),
     r"data_parallel_replicas=3 needs 3 x tensor_parallel_size .* valid: 1..2"),
    (cfg(generation_gpus=8), r"generation_gpus=8 on a 8-GPU node .* 1..7, or null \(half: 4\)"),
    (cfg("ppo_off_policy", tensor_parallel_size=2), r"tensor_parallel_size=2 with off_policy."
                                                   r"mode=ppo_off_policy: .* valid: 1 or null"),
])
def test_a_layout_the_nodes_cannot_hold_is_one_line(c, message):
    with pytest.raises(TopologyError, match=message) as e:
        topology(c, shape())
    assert "\n" not in str(e.value)


def test_every_process_binds_to_the_topology():
    """2 nodes x 8 GPUs named by the launcher (UUIDs), 4 tasks a node: the binding maps the
    layout onto the names, and only the starting nodes' local rank 0 hosts engines."""
    names = tuple(f"GPU-{i}" for i in range(8))
    for c, hosts in ((cfg(tensor_parallel_size=2), {0, 4}), (cfg("ppo_off_policy"), {0})):
        ranks = 4 if c.off_policy.mode == "pipeline" else 8
        t = topology(c, shape(ranks=ranks))
        binds = [plan_binding(t, names, rank=n * ranks + r, world_size=2 * ranks, node=n,
                              local_rank=r, local_world_size=ranks)
                 for n in range(2) for r in range(ranks)]
        assert {b.rank for b in binds if b.engines} == hosts
        assert [b.gpu for b in binds[:ranks]] == [names[i] for i in t.training[:ranks]]
    assert binds[0].engines == (("GPU-0",),) and binds[0].shared  # ppo: on rank 0's GPU
    pipe = plan_binding(topology(cfg(tensor_parallel_size=2), shape()), names, rank=0,
                        world_size=8, node=0, local_rank=0, local_world_size=4)
    assert pipe.engines == (("GPU-0", "GPU-1"), ("GPU-2", "GPU-3")) and not pipe.shared
    assert pipe.gpu == "GPU-4" and pipe.generation_gpus == names[:4]
    with pytest.raises(ValueError, match="local rank 4 has no GPU of its own.*tasks_per_node: 4"):
        plan_binding(topology(cfg(), shape()), names, rank=4, world_size=5, node=0,
                     local_rank=4, local_world_size=5)


def test_what_the_engines_are_sent_and_the_idle_gpus_said():
    c = cfg(tensor_parallel_size=1, data_parallel_replicas=3)
    t = topology(c, shape())
    # pipeline: a node's call of prompts_per_step / 2 groups x 16 samples over 3 replicas,
    # plus eval (1,000 prompts x 16) on rank 0's node: ceil((24 x 16 + 16000) / 3)
    assert rows_per_engine(c, t) == -(-(24 * 16 + 16_000) // 3)
    note = placement_note(c, shape(), t)
    assert note.startswith("3 vLLM engines of 1 GPU each on every node (2 nodes, 6 in all)")
    assert "2 of the job's 16 GPUs are idle (1 on rank 0's node, 1 on the other node)" in note
    assert "3 engine(s) x tensor_parallel_size 1 use 3 of each node's 4 generation GPUs" in note
