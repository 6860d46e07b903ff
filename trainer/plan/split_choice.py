"""The split of every node's GPUs between the vLLM engines and the training ranks when
rollout.vllm.generation_gpus is `auto` (the default): the split whose planned step is shortest
with the memory plan fitting.

Why: a fixed half leaves the paper recipe's step generation-bound (20 min generating, 6 min
training on 2 x 8 H100s: the training GPUs idle ~70% of it) while 6 generating / 2 training
GPUs fit and plan 13 min. The choice is the plans' own: for every candidate split
(trainer/plan/topology.py split_choices) the memory plan (memory.py) and the step of the time
plan (time_plan.py) on that split's topology; a candidate whose training or engine memory does
not fit, or whose engine vLLM would refuse, is out. The shortest step wins; on a tie the split
with more generation GPUs (with the ranks fixed, the rest would idle).

One function for both sides: `topology()` calls it for an `auto` config, so the dry run (on the
launch profile's shape: its nodes, GPUs, GPU size and model; under `tasks_per_node: auto` one
rank per training GPU of each candidate) and the trainer's start-up binding (on the job the
launcher started: its ranks per node are fixed, so only splits that leave each rank a GPU are
candidates, and with the ranks fixed more generation GPUs never lengthen a step: the launched
job gets the split the dry run showed) resolve it the same way.

Node roles (trainer/plan/topology.py: whole nodes generate, whole nodes train) are candidates
too on a job of >= 2 nodes: every count of generation nodes, 1 .. nodes - 1, that the
training ranks can feed (one each), planned the same way (`role_choices`). On a tie the
per-node split wins (the layout that moves no weights over the network). ROLES_RUN (topology.py)
says whether `auto` may choose them: a layout chosen here must be one the job it launches can
start (trainer/generation/node_host.py starts them); with it off the dry run still asks for
them (`choose_split(..., roles=True)`) to name the best one beside the choice.

Where nothing can be planned (model shape unknown) the split is the GPUs the launched ranks
leave, or half under `tasks_per_node: auto`, and the choice says why. Pure Python (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.topology import ROLES_RUN, JobShape, TopologyError, split_choices

# Two planned steps closer than this (relative) are a tie: the plans are estimates, and a tie
# broken by rounding would make the choice depend on the last digit.
TIE = 1e-6


@dataclass(frozen=True)
class SplitOption:
    """One candidate: a split of every node, or node roles (generation_nodes > 0: that many
    whole nodes of generation_gpus engines' GPUs, the rest of training_gpus ranks each); its
    planned step and memory, or why it is out."""

    generation_gpus: int
    training_gpus: int
    step_s: Optional[float] = None
    generation_s: Optional[float] = None
    train_s: Optional[float] = None
    train_gib: Optional[float] = None  # per training GPU
    fits: Optional[bool] = None  # the memory plan (None: no GPU size to check against)
    out: str = ""  # why it cannot be chosen ("" = it can)
    generation_nodes: int = 0  # node roles: whole generation nodes (0: a per-node split)

    @property
    def key(self) -> tuple[int, int]:
        return (self.generation_nodes, self.generation_gpus)

    def to_json(self) -> dict:
        return {"generation_nodes": self.generation_nodes or None,
                "generation_gpus": self.generation_gpus, "training_gpus": self.training_gpus,
                "step_s": self.step_s, "generation_s": self.generation_s,
                "train_s": self.train_s, "train_gib_per_gpu": self.train_gib,
                "fits": self.fits, "out": self.out or None}


@dataclass(frozen=True)
class SplitChoice:
    """The split `auto` resolves to on one job shape, with every candidate weighed."""

    generation_gpus: Optional[int]  # None: no candidate (the ranks leave no GPU to generate)
    why: str  # how it was chosen, in words
    options: tuple[SplitOption, ...] = ()
    generation_nodes: int = 0  # node roles chosen: whole generation nodes (0: per-node split)

    def resolved(self) -> int:
        """The chosen split; TopologyError (one line) when there is none."""
        if self.generation_gpus is None:
            raise TopologyError(self.why)
        return self.generation_gpus

    def option(self, g: Optional[int], nodes: int = 0) -> Optional[SplitOption]:
        return next((o for o in self.options if o.key == (nodes, g)), None)

    def chosen(self) -> Optional[SplitOption]:
        return self.option(self.generation_gpus, self.generation_nodes)

    def neighbours(self) -> list[SplitOption]:
        """The candidates one generation GPU (roles: node) fewer and one more than the choice."""
        g, n = self.generation_gpus, self.generation_nodes
        if n:
            near = (self.option(g, n - 1), self.option(g, n + 1))
        else:
            near = (self.option(g - 1), self.option(g + 1)) if g else ()
        return [o for o in near if o and bool(o.generation_nodes) == bool(n)]

    def best_roles(self) -> Optional[SplitOption]:
        """The node-roles candidate with the shortest planned step (None: none planned)."""
        ok = [o for o in self.options if o.generation_nodes and not o.out]
        return min(ok, key=lambda o: (o.step_s, -o.generation_nodes)) if ok else None

    def to_json(self) -> dict:
        return {"generation_gpus": self.generation_gpus,
                "generation_nodes": self.generation_nodes or None, "why": self.why,
                "options": [o.to_json() for o in self.options]}


def with_split(c: TrainConfig, g: int, nodes: int = 0) -> TrainConfig:
    """`c` with rollout.vllm.generation_gpus set to `g`, or with `nodes` > 0 generation_nodes
    (what each candidate is planned as)."""
    update = {"generation_nodes": nodes} if nodes else {"generation_gpus": g}
    vllm = c.rollout.vllm.model_copy(update=update)
    return c.model_copy(update={"rollout": c.rollout.model_copy(update={"vllm": vllm})})


def _heads_refuse(c: TrainConfig, cg: TrainConfig, shape: JobShape) -> str:
    """Why vLLM would refuse this candidate's engines: the attention heads must divide over
    the tensor-parallel GPUs (vllm/config/model.py:1546 verify_with_parallel_config)."""
    from trainer.plan.model_shape import model_shape, proxy_shape
    from trainer.plan.topology import topology

    name = c.model.name_or_path
    m = proxy_shape(c) if name is None else model_shape(name)[0]
    tp = topology(cg, shape).tp
    if m is not None and m.heads % tp:
        return f"vLLM refuses tensor_parallel_size {tp} for {m.heads} attention heads"
    return ""


def plan_option(c: TrainConfig, shape: JobShape, g: int, nodes: int = 0,
                a=None) -> SplitOption:
    """One candidate planned: the memory plan and a step of the time plan on its topology
    (`nodes` > 0: node roles, `nodes` generation nodes of all `g` GPUs), on the rates `a`
    takes (trainer/plan/time_model.py Assume; None: the constants)."""
    from trainer.plan.memory import plan
    from trainer.plan.time_plan import Limits, plan_time

    gpus = shape.gpus_per_node or 0
    cg = with_split(c, g, nodes)
    train_gpus = gpus if nodes else gpus - g
    at = replace(shape, ranks_per_node=train_gpus, ranks_auto=False) if shape.ranks_auto else shape
    try:
        out = _heads_refuse(c, cg, at)
    except TopologyError as e:
        return SplitOption(g, train_gpus, out=str(e), generation_nodes=nodes)
    p = plan(cg, at)
    t = plan_time(cg, at, Limits(gpu_model=shape.gpu_model), *([a] if a else []))
    if not out and p.fits is False:
        out = (f"training needs {p.train_gib_per_gpu:g} GiB of {p.train_budget_gib:g}"
               if p.train_gib_per_gpu > p.train_budget_gib else
               f"the engines do not fit ({p.kv_sequences})")
    if not out and t.step_s is None:
        out = t.note or "no time plan"
    return SplitOption(g, train_gpus, t.step_s, t.generation_s, t.train_s, p.train_gib_per_gpu,
                       p.fits, out, nodes)


def role_choices(c: TrainConfig, shape: JobShape) -> list[int]:
    """Generation nodes a node-roles layout could have: 1 .. nodes - 1 with vLLM on >= 2 nodes
    of GPUs (trainer/plan/topology.py roles_topology), else none."""
    from trainer.plan.topology import separate_generation

    if not separate_generation(c) or not shape.gpus_per_node or shape.nodes < 2 \
            or c.rollout.vllm.client == "trainer":  # a generation node's engines need a host
        return []
    # one training rank feeds each generation node (Topology.fed_node)
    ranks = shape.gpus_per_node if shape.ranks_auto else shape.ranks_per_node
    return [n for n in range(1, shape.nodes) if n <= (shape.nodes - n) * ranks]


_CACHE: dict[tuple[str, JobShape], SplitChoice] = {}
CACHE_SIZE = 512


def choose_split(c: TrainConfig, shape: JobShape, roles: bool = ROLES_RUN,
                 a=None) -> SplitChoice:
    """The split `auto` resolves to on `shape` (module doc); `roles`: node roles planned and
    chosen too; with `a`, the split the rates runs measured would choose (the dry run's
    re-plan of runs not started: ablate/studies/measured.py). Cached by the config's content:
    the plans call `topology` several times a variant, and a sweep plans thousands."""
    key = (c.model_dump_json(), shape, roles, a)
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = _choose(c, shape, roles, a)
    return _CACHE[key]


def _choose(c: TrainConfig, shape: JobShape, roles: bool, a=None) -> SplitChoice:
    gpus = shape.gpus_per_node or 0
    choices = split_choices(c, shape)
    options = tuple(plan_option(c, shape, g, a=a) for g in choices) + tuple(
        plan_option(c, shape, gpus, n, a) for n in (role_choices(c, shape) if roles else ()))
    if not options:
        return SplitChoice(None, _no_room(shape))
    ok = [o for o in options if not o.out]
    if ok:
        best = min(o.step_s for o in ok)
        # a tie: the per-node split first (no weights over the network), then more generating
        tied = [o for o in ok if o.step_s <= best * (1 + TIE)]
        o = min(tied, key=lambda o: (o.generation_nodes > 0, -o.generation_gpus,
                                     -o.generation_nodes))
        return SplitChoice(o.generation_gpus, "auto: the shortest planned step whose memory "
                           "fits", options, o.generation_nodes)
    if not choices:
        return SplitChoice(None, _no_room(shape), options)
    fallback = choices[-1] if not shape.ranks_auto else max(1, gpus // 2)
    planned = [o for o in options if o.train_gib is not None and not o.generation_nodes]
    near = min(planned, key=lambda o: o.train_gib) if planned else options[0]
    return SplitChoice(fallback, f"auto: no split could be planned or fits (the closest, "
                       f"{near.generation_gpus}/{near.training_gpus}: {near.out}); "
                       f"{fallback} of {gpus} generate", options)


def _no_room(shape: JobShape) -> str:
    gpus, ranks = shape.gpus_per_node or 0, shape.ranks_per_node
    return (f"rollout.vllm.generation_gpus=auto: {ranks} ranks per node (slurm.tasks_per_node) "
            f"leave none of a node's {gpus} GPUs to the vLLM engines (rollout.backend=vllm); "
            f"use slurm.tasks_per_node: auto (one rank per training GPU of the split the plan "
            f"picks) or at most {gpus - 1}")
