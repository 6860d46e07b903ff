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

Where nothing can be planned (model shape unknown) the split is the GPUs the launched ranks
leave, or half under `tasks_per_node: auto`, and the choice says why. Pure Python (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.topology import JobShape, TopologyError, split_choices

# Two planned steps closer than this (relative) are a tie: the plans are estimates, and a tie
# broken by rounding would make the choice depend on the last digit.
TIE = 1e-6


@dataclass(frozen=True)
class SplitOption:
    """One candidate split of a node: its planned step and memory, or why it is out."""

    generation_gpus: int
    training_gpus: int
    step_s: Optional[float] = None
    generation_s: Optional[float] = None
    train_s: Optional[float] = None
    train_gib: Optional[float] = None  # per training GPU
    fits: Optional[bool] = None  # the memory plan (None: no GPU size to check against)
    out: str = ""  # why it cannot be chosen ("" = it can)

    def to_json(self) -> dict:
        return {"generation_gpus": self.generation_gpus, "training_gpus": self.training_gpus,
                "step_s": self.step_s, "generation_s": self.generation_s,
                "train_s": self.train_s, "train_gib_per_gpu": self.train_gib,
                "fits": self.fits, "out": self.out or None}


@dataclass(frozen=True)
class SplitChoice:
    """The split `auto` resolves to on one job shape, with every candidate weighed."""

    generation_gpus: Optional[int]  # None: no candidate (the ranks leave no GPU to generate)
    why: str  # how it was chosen, in words
    options: tuple[SplitOption, ...] = ()

    def resolved(self) -> int:
        """The chosen split; TopologyError (one line) when there is none."""
        if self.generation_gpus is None:
            raise TopologyError(self.why)
        return self.generation_gpus

    def option(self, g: Optional[int]) -> Optional[SplitOption]:
        return next((o for o in self.options if o.generation_gpus == g), None)

    def neighbours(self) -> list[SplitOption]:
        """The candidates one generation GPU fewer and one more than the choice."""
        g = self.generation_gpus
        return [o for o in (self.option(g - 1), self.option(g + 1)) if o] if g else []

    def to_json(self) -> dict:
        return {"generation_gpus": self.generation_gpus, "why": self.why,
                "options": [o.to_json() for o in self.options]}


def with_split(c: TrainConfig, g: int) -> TrainConfig:
    """`c` with rollout.vllm.generation_gpus set to `g` (what each candidate is planned as)."""
    vllm = c.rollout.vllm.model_copy(update={"generation_gpus": g})
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


def plan_option(c: TrainConfig, shape: JobShape, g: int, a=None) -> SplitOption:
    """One candidate planned: the memory plan and a step of the time plan on its topology
    (on the rates `a` takes: trainer/plan/time_model.py Assume; None: the constants)."""
    from trainer.plan.memory import plan
    from trainer.plan.time_plan import Limits, plan_time

    gpus = shape.gpus_per_node or 0
    cg = with_split(c, g)
    at = replace(shape, ranks_per_node=gpus - g, ranks_auto=False) if shape.ranks_auto else shape
    try:
        out = _heads_refuse(c, cg, at)
    except TopologyError as e:
        return SplitOption(g, gpus - g, out=str(e))
    p = plan(cg, at)
    t = plan_time(cg, at, Limits(gpu_model=shape.gpu_model), *([a] if a else []))
    if not out and p.fits is False:
        out = (f"training needs {p.train_gib_per_gpu:g} GiB of {p.train_budget_gib:g}"
               if p.train_gib_per_gpu > p.train_budget_gib else
               f"the engines do not fit ({p.kv_sequences})")
    if not out and t.step_s is None:
        out = t.note or "no time plan"
    return SplitOption(g, gpus - g, t.step_s, t.generation_s, t.train_s, p.train_gib_per_gpu,
                       p.fits, out)


_CACHE: dict[tuple[str, JobShape], SplitChoice] = {}
CACHE_SIZE = 512


def choose_split(c: TrainConfig, shape: JobShape, a=None) -> SplitChoice:
    """The split `auto` resolves to on `shape` (module doc); with `a`, the split the rates
    runs measured would choose (the dry run's re-plan of runs not started: ablate/studies/
    measured.py). Cached by the config's content: the plans call `topology` several times a
    variant, and a sweep plans thousands."""
    key = (c.model_dump_json(), shape, a)
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = _choose(c, shape, a)
    return _CACHE[key]


def _choose(c: TrainConfig, shape: JobShape, a=None) -> SplitChoice:
    gpus = shape.gpus_per_node or 0
    choices = split_choices(c, shape)
    if not choices:
        return SplitChoice(None, _no_room(shape))
    options = tuple(plan_option(c, shape, g, a) for g in choices)
    ok = [o for o in options if not o.out]
    if ok:
        best = min(o.step_s for o in ok)
        g = max(o.generation_gpus for o in ok if o.step_s <= best * (1 + TIE))
        return SplitChoice(g, "auto: the shortest planned step whose memory fits", options)
    fallback = choices[-1] if not shape.ranks_auto else max(1, gpus // 2)
    planned = [o for o in options if o.train_gib is not None]
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
