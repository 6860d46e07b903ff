"""trainer/plan/topology.py: the one statement of where a job's ranks and engines go, against
layouts worked out by hand, and the binding of every process of a job read from it.

The topology is the only place the split is decided: the binding (trainer/dist/binding.py),
both plans, the validation and gpu_hours read it, so the tests here check the layout itself,
not that copies agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainer.config import TrainConfig
from trainer.dist.binding import plan_binding
from trainer.plan.placement import placement_note, rows_per_engine
from trainer.plan.engine_fit import scheduler_limits
from trainer.plan.split_choice import choose_split
from trainer.plan.topology import JobShape, TopologyError, split, split_choices, topology

ROOT = Path(__file__).resolve().parents[1]

SMALL = "Qwen/Qwen2.5-0.5B"  # ~1 GiB of bf16 weights: fits one 40/80 GiB GPU


def cfg(mode: str = "pipeline", backend: str = "vllm", model=None, **vllm) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"name_or_path": model}, "off_policy": {"mode": mode},
        "rollout": {"backend": backend, "vllm": vllm},
        "engine": {"type": "deepspeed", "zero_stage": 3} if model else {}})


def shape(nodes=2, ranks=4, gpus=8, gib=None) -> JobShape:
    return JobShape(nodes=nodes, ranks_per_node=ranks, gpus_per_node=gpus, gpu_memory_gib=gib)


def test_pipeline_with_vllm_gives_four_ranks_per_node_their_four_gpus():
    t = topology(cfg(), shape())  # `auto` with 4 ranks a node: the 4 GPUs they leave generate
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
    free = JobShape(nodes=2, gpus_per_node=8, ranks_auto=True)  # tasks_per_node: auto
    assert split_choices(c, free) == [1, 2, 3, 4, 5, 6, 7]
    assert split_choices(c, shape()) == [1, 2, 3, 4]  # 4 ranks a node: each keeps a GPU
    layouts = {g: topology(c, free, generation_gpus=g) for g in split_choices(c, free)}
    assert [len(t.engines) for t in layouts.values()] == [1, 2, 3, 4, 5, 6, 7]  # one GPU each
    assert [t.training_ranks for t in layouts.values()] == [14, 12, 10, 8, 6, 4, 2]
    assert {t.devices for t in layouts.values()} == {16}  # the job holds its GPUs either way
    assert split_choices(cfg("ppo_off_policy"), shape()) == [1, 2, 3, 4]  # the same split
    assert split_choices(cfg(backend="hf"), shape()) == []  # nothing to choose
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
    # generation_gpus null (no `auto`): on one-GPU nodes the engine shares the rank's GPU
    one_gpu = topology(cfg(generation_gpus=None), shape(nodes=2, ranks=1, gpus=1))
    assert one_gpu.training == (0,) and one_gpu.engines == ((0,),) and not one_gpu.own_gpus
    assert one_gpu.engine_nodes == 2  # pipeline: every node generates its share
    assert one_gpu.shares_training_gpu  # refused at validation (two NCCL ranks on one GPU)
    # `auto` (the trainer starts node roles) gives the engine a node of its own instead
    roles = topology(cfg(), shape(nodes=2, ranks=1, gpus=1))
    assert roles.roles and roles.engines == ((0,),) and not roles.shares_training_gpu
    assert roles.fed_node(0) == 1 and roles.fed_node(1) is None
    cpu = topology(cfg(), JobShape(nodes=1, ranks_per_node=2))
    assert cpu.engines == ((),) and cpu.training_ranks == 2 and cpu.devices == 2
    hf = topology(cfg(backend="hf"), shape(ranks=8))
    assert hf.engines == () and hf.training == tuple(range(8)) and hf.devices == 16


@pytest.mark.parametrize("nodes", [1, 2, 10])
def test_ppo_off_policy_generates_on_every_nodes_own_gpus(nodes):
    """ppo_off_policy with vLLM (issue 46 point 1): before, one engine set on rank 0's node,
    sharing local rank 0's training GPU (one engine for a job of 16 GPUs, and a weight push of
    two NCCL ranks on one GPU). Now the per-node split of pipeline mode: every node's local
    rank 0 starts engines on its node's own generation GPUs, no training GPU among them."""
    c = cfg("ppo_off_policy", model=SMALL)
    t = topology(c, JobShape(nodes=nodes, gpus_per_node=8, gpu_memory_gib=80, ranks_auto=True))
    assert t.engine_nodes == nodes and t.own_gpus and not t.shares_training_gpu
    engine_gpus = {g for e in t.engines for g in e}
    assert engine_gpus == set(t.generation) and not engine_gpus & set(t.training)
    assert [t.starts_engines(n, 0) for n in range(nodes)] == [True] * nodes
    assert not any(t.starts_engines(n, 1) for n in range(nodes))
    assert t.training_ranks == nodes * len(t.training) and t.devices == nodes * 8
    assert all(t.idle_gpus(n) == 0 for n in range(nodes))
    # the same split as pipeline mode gets on that shape, when both are told it
    pipe = topology(cfg(model=SMALL, generation_gpus=len(t.generation)), t.shape)
    assert (pipe.generation, pipe.training, pipe.engines) == (t.generation, t.training, t.engines)
    # a one-GPU node would put the engine on the training GPU: said, for validate to refuse
    half = cfg("ppo_off_policy", model=SMALL, generation_gpus=None)
    one = topology(half, JobShape(nodes=nodes, ranks_per_node=1, gpus_per_node=1))
    assert one.shares_training_gpu and one.engines == ((0,),) and one.engine_nodes == nodes


@pytest.mark.parametrize("c, message", [
    (cfg(tensor_parallel_size=3), r"tensor_parallel_size=3 does not divide the 4 generation "
                                  r"GPUs per node \(8-GPU nodes\); valid: 1, 2, 4"),
    (cfg(tensor_parallel_size=2, data_parallel_replicas=3, generation_gpus=4),
     r"data_parallel_replicas=3 needs 3 x tensor_parallel_size .* valid: 1..2"),
    (cfg(generation_gpus=8), r"generation_gpus=8 on a 8-GPU node .* 1..7, or auto \(the split"),
    (cfg("ppo_off_policy", tensor_parallel_size=3), r"tensor_parallel_size=3 does not divide "
                                                   r"the 4 generation GPUs .* valid: 1, 2, 4"),
])
def test_a_layout_the_nodes_cannot_hold_is_one_line(c, message):
    with pytest.raises(TopologyError, match=message) as e:
        topology(c, shape())
    assert "\n" not in str(e.value)


def test_every_process_binds_to_the_topology():
    """2 nodes x 8 GPUs named by the launcher (UUIDs), 4 tasks a node: the binding maps the
    layout onto the names, and only the starting nodes' local rank 0 hosts engines."""
    names = tuple(f"GPU-{i}" for i in range(8))
    for c, hosts in ((cfg(tensor_parallel_size=2), {0, 4}),
                     (cfg("ppo_off_policy", tensor_parallel_size=1), {0, 4})):
        ranks = 4
        t = topology(c, shape(ranks=ranks))
        binds = [plan_binding(t, names, rank=n * ranks + r, world_size=2 * ranks, node=n,
                              local_rank=r, local_world_size=ranks)
                 for n in range(2) for r in range(ranks)]
        assert {b.rank for b in binds if b.engines} == hosts
        assert [b.gpu for b in binds[:ranks]] == [names[i] for i in t.training[:ranks]]
    # ppo_off_policy: every node's engines on its own generation GPUs, never a training one
    assert binds[0].engines == tuple((f"GPU-{i}",) for i in range(4)) and not binds[0].shared
    assert binds[4].engines == binds[0].engines and binds[0].gpu == "GPU-4"
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
    # plus eval (1,000 prompts x 16) dealt over both nodes' 6 engines (trainer/loop/
    # final_eval.py): ceil(24 x 16 / 3 + 16000 / 6)
    assert rows_per_engine(c, t) == -(-(24 * 16 * 2 + 16_000) // 6)
    note = placement_note(c, shape(), t)
    assert note.startswith("3 vLLM engines of 1 GPU each on every node (2 nodes, 6 in all)")
    assert "2 of the job's 16 GPUs are idle (1 on rank 0's node, 1 on the other node)" in note
    assert "3 engines x tensor_parallel_size 1 use 3 of each node's 4 generation GPUs" in note


# --- rollout.vllm.generation_gpus: auto (trainer/plan/split_choice.py) -------------------------

def paper(**vllm) -> TrainConfig:
    """recipes/scalerl.yaml as written: Qwen/Qwen3-8B, ZeRO-3, pipeline mode with vLLM."""
    tree = yaml.safe_load((ROOT / "recipes" / "scalerl.yaml").read_text())
    tree["rollout"].setdefault("vllm", {}).update(vllm)
    return TrainConfig.model_validate(tree)


H100 = dict(nodes=2, gpus_per_node=8, gpu_memory_gib=80, gpu_model="h100")


def test_auto_picks_six_generating_two_training_gpus_for_the_paper_recipe():
    """Worked by hand on 2 nodes x 8 H100s of 80 GiB, one rank per training GPU:
    - training memory per GPU with d = 2 x (8 - g) ranks: ZeRO-3's 16 bytes a parameter over
      d, 16 x 8.191e9 / d, plus what does not shrink with d (the gathered layers and head
      1.88 GiB, checkpoints 9.25, recomputed layer 10.88, logits chunk 5.32, CUDA 1: 28.33).
      g = 7 (d = 2): 61.03 + 28.33 = 89.36 GiB > 80, out; g = 6 (d = 4): 30.52 + 28.33 = 58.85.
    - every engine decodes the same number of sequences at any g (its KV room, 24 with each
      sequence's whole footprint reserved as the stream deals them, is below the 384 / g it is
      sent), so generation takes G / g; training's FLOPs divide over the ranks, T / (8 - g).
      The step is max(G / g, T / (8 - g)), shortest near g = 8G / (G + T) ~ 6.26: g = 6
      (g = 7 does not fit; g = 5 is generation-bound)."""
    c = paper()
    ch = choose_split(c, JobShape(**H100, ranks_auto=True))
    by = {o.generation_gpus: o for o in ch.options if not o.generation_nodes}
    assert by[7].train_gib == pytest.approx(89.36, abs=0.02) and "89.35 GiB of 80" in by[7].out
    assert by[6].train_gib == pytest.approx(58.85, abs=0.02) and by[6].fits and not by[6].out
    G, T = by[1].generation_s, by[1].train_s * 7
    for g, o in by.items():
        assert o.generation_s == pytest.approx(G / g, rel=1e-9), g
        assert o.train_s == pytest.approx(T / (8 - g), rel=1e-9), g
        assert o.step_s == pytest.approx(max(G / g, T / (8 - g)), rel=1e-9), g
    assert 8 * G / (G + T) == pytest.approx(6.26, abs=0.01)
    assert ch.generation_gpus == 6 and [o.generation_gpus for o in ch.neighbours()] == [5, 7]
    t = topology(c, JobShape(**H100, ranks_auto=True))
    assert t.generation == (0, 1, 2, 3, 4, 5) and t.training == (6, 7)
    assert t.shape.ranks_per_node == 2 and t.training_ranks == 4 and len(t.engines) == 6


def test_auto_with_the_ranks_fixed_and_a_set_split():
    """Ranks per node fixed (a profile's number, or the job the launcher started): only the
    splits that leave each rank a GPU; with the ranks fixed, training is the same at every
    candidate and more engines only shorten generation, so the GPUs the ranks leave generate.
    A set number wins; null keeps the old half."""
    c = paper()
    assert choose_split(c, JobShape(**H100, ranks_per_node=4)).generation_gpus == 4
    assert [o.generation_gpus for o in choose_split(c, JobShape(**H100, ranks_per_node=4))
            .options if not o.generation_nodes] == [1, 2, 3, 4]
    launched = topology(c, JobShape(**H100, ranks_per_node=2))  # what the dry run chose
    assert launched.generation == tuple(range(6)) and launched.training == (6, 7)
    assert topology(paper(generation_gpus=3), JobShape(**H100, ranks_auto=True)).training == \
        (3, 4, 5, 6, 7)
    assert len(topology(paper(generation_gpus=None), JobShape(**H100, ranks_auto=True))
               .generation) == 4
    # 8 ranks a node on 2 nodes: one node trains, the other generates (node roles)
    assert topology(c, JobShape(**H100, ranks_per_node=8)).layout() == \
        "node roles: 1 generation + 1 training node"
    with pytest.raises(TopologyError, match="8 ranks per node .* leave none of a node's 8 GPUs"
                       ".*tasks_per_node: auto"):
        topology(c, JobShape(**{**H100, "nodes": 1}, ranks_per_node=8))


def test_auto_leaves_out_what_vllm_or_the_nodes_refuse():
    """tensor_parallel_size 2 set: an odd split cannot hold 2-GPU engines; a model whose shape
    is not known cannot be planned: the GPUs the ranks leave (fixed), or half (auto ranks)."""
    ch = choose_split(paper(tensor_parallel_size=2), JobShape(**H100, ranks_auto=True))
    outs = {o.generation_gpus: o.out for o in ch.options}
    assert all("does not divide" in outs[g] for g in (1, 3, 5, 7)), outs
    assert ch.generation_gpus == 6 and not outs[6]
    unknown = cfg(model="no-such/model")
    fixed = choose_split(unknown, shape(ranks=3, gib=80))
    assert fixed.generation_gpus == 5 and "no split could be planned" in fixed.why
    assert choose_split(unknown, JobShape(**H100, ranks_auto=True)).generation_gpus == 4


@pytest.mark.parametrize("gib, model, limits", [
    (80, "h100", (1024, 16384)), (141, "h200", (1024, 16384)), (192, "b200", (1024, 16384)),
    (80, "a100", (256, 8192)), (48, None, (256, 8192)), (None, "h100", (256, 8192))])
def test_vllm_032_scheduler_limits_by_gpu(gib, model, limits):
    """vllm/engine/arg_utils.py:2894-2985 (0.32.0) for an LLM-class engine: >= 70 GiB and
    not an A100, or >= 160 GiB: 1,024 sequences, 16,384 tokens a step; else (and where the
    GPU is not known) 256 and 8,192."""
    assert scheduler_limits(gib, model) == limits


# --- node roles: whole nodes generate, whole nodes train (issue 46 point 4) --------------------

PAPER10 = dict(H100, nodes=10)


def test_node_roles_put_every_engine_and_every_rank_on_nodes_of_their_own():
    """The paper's 64/16 GPUs as 8 generation + 2 training nodes: training nodes first (node
    0 holds rank 0), one rank per GPU there; 8 one-GPU engines on each generation node, hosted
    by its one process, which trains nowhere: no GPU holds a rank and an engine."""
    t = topology(paper(generation_nodes=8), JobShape(**PAPER10, ranks_auto=True))
    assert t.roles and t.training_nodes == 2 and t.engine_nodes == 8
    assert t.training == tuple(range(8)) and t.training_ranks == 16 and len(t.engines) == 8
    assert t.devices == 80 and t.layout() == "node roles: 8 generation + 2 training nodes"
    assert [t.idle_gpus(n) for n in range(10)] == [0] * 10
    names = tuple(f"GPU-{i}" for i in range(8))
    for node in range(10):
        b = plan_binding(t, names, rank=node * 8, world_size=24, node=node, local_rank=0,
                         local_world_size=8 if node < 2 else 1)
        used = {b.gpu} | {g for e in b.engines for g in e}
        assert (b.gpu is None) == bool(b.engines) == (node >= 2), node
        assert len(used - {None}) == (8 if node >= 2 else 1) and not b.shared
        # the training world is the training nodes' ranks (Slurm starts 8 tasks on every node)
        assert b.world_size == 16 and b.trains == (node < 2), node
    # a generation node's other tasks (srun starts tasks_per_node everywhere) run nothing
    idle = plan_binding(t, names, rank=73, world_size=80, node=9, local_rank=1,
                        local_world_size=8)
    assert not idle.trains and idle.gpu is None and idle.engines == ()
    assert [t.fed_node(r) for r in (0, 7, 8, 15)] == [2, 9, None, None]
    note = placement_note(paper(generation_nodes=8), t.shape, t)
    assert note.startswith("8 vLLM engines of 1 GPU each on each of 8 generation nodes (64 in "
                           "all; the other 2 nodes train, 16 ranks) serve the job's rollouts, "
                           "each node 6 of a step's 48 prompt groups"), note


def test_auto_weighs_node_roles_by_the_same_plans():
    """Node roles are candidates of `auto` on >= 2 nodes, planned as the splits are. Worked by
    hand: 5 generation nodes of 8 one-GPU engines and a split of 4 on each of 10 nodes both
    have 40 engines, each sent 20 sequences (48 groups x 16 over 5 nodes x 8, or 5 groups
    x 16 over 4 engines on the busiest of 10 nodes), and 40 training ranks: the same step.
    Among per-node splits alone `auto` takes 6/2; with node roles (the trainer starts them:
    ROLES_RUN) it takes 8 + 2 for the paper recipe on 10 nodes: generation on 64 engines of 12
    sequences each beats 60 of 14 by less than training on 16 ranks loses to 20."""
    c, at = paper(), JobShape(**PAPER10, ranks_auto=True)
    ch = choose_split(c, at, roles=False)  # per-node splits only: roles not even planned
    assert (ch.generation_nodes, ch.generation_gpus) == (0, 6)
    assert not any(o.generation_nodes for o in ch.options)
    free = choose_split(c, at, roles=True)
    roles = {o.generation_nodes: o for o in free.options if o.generation_nodes}
    # 9 generation nodes would need 9 feeders; 1 training node has 8 ranks (Topology.fed_node)
    assert sorted(roles) == list(range(1, 9)) and not any(o.out for o in roles.values())
    four = ch.option(4)
    assert roles[5].step_s == pytest.approx(four.step_s, rel=1e-9)
    assert roles[5].train_s == pytest.approx(four.train_s, rel=1e-9)
    assert free.best_roles().generation_nodes == 8
    assert (free.generation_nodes, free.generation_gpus) == (8, 8)
    assert roles[8].step_s < ch.option(6).step_s and roles[8].train_s > ch.option(6).train_s
    assert [o.generation_nodes for o in free.neighbours()] == [7]
    assert choose_split(c, JobShape(**{**H100, "nodes": 1}, ranks_auto=True), roles=True) \
        .generation_nodes == 0  # one node: no roles to weigh


def test_node_roles_give_one_gpu_nodes_engines_of_their_own():
    """On one-GPU nodes a per-node split has no room (the engine would share the training
    rank's GPU: refused, two NCCL ranks on one GPU); node roles give the engine a node of its
    own, planned at vLLM's 0.9 of that GPU, not the shared 0.3."""
    from trainer.plan.memory import plan

    one = JobShape(nodes=2, ranks_per_node=1, gpus_per_node=1, gpu_memory_gib=80)
    shared = topology(paper(generation_gpus=None), one)
    assert shared.shares_training_gpu and not shared.roles
    t = topology(paper(generation_nodes=1), one)
    assert t.roles and t.own_gpus and not t.shares_training_gpu and t.engines == ((0,),)
    assert t.training_ranks == 1 and t.engine_nodes == 1
    assert plan(paper(generation_nodes=1), one).generation_where == "own GPUs"
    assert plan(paper(generation_gpus=None), one).generation_where == "training GPUs (shared)"
