"""The dry run's line on a run's split of every node's GPUs between the vLLM engines and the
training ranks: the split the job will get, how it was chosen, its planned step, and its
neighbours' (one generation GPU fewer and one more), so a reader sees why it is that one.

The choice itself is trainer/plan/split_choice.py (through trainer/plan/topology.py, which the
trainer's start-up binding also calls); this module only says it in words and in `--json`, as
the adapter's `split_lines` and `split_json` (ablate/adapters/__init__.py asks the variant's).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from trainer.config import TrainConfig
from trainer.plan.split_choice import SplitChoice, SplitOption, choose_split, plan_option
from trainer.plan.time_plan import dur
from trainer.plan.topology import (ROLES_RUN, JobShape, TopologyError, set_roles, split_choices,
                                   topology)


def _pair(o: SplitOption) -> str:
    if o.generation_nodes:
        return f"{o.generation_nodes} generation node{'s' if o.generation_nodes > 1 else ''}"
    return f"{o.generation_gpus}/{o.training_gpus}"


def _option(o: SplitOption) -> str:
    """A candidate in a few words: its step, or why it is out."""
    return f"{_pair(o)} {o.out}" if o.out else f"{_pair(o)} step {dur(o.step_s)}"


def _auto(c: TrainConfig) -> TrainConfig:
    """`c` with the split left to the plan, to say what `auto` would choose."""
    vllm = c.rollout.vllm.model_copy(update={"generation_gpus": "auto"})
    return c.model_copy(update={"rollout": c.rollout.model_copy(update={"vllm": vllm})})


def _elsewhere(c: TrainConfig, shape: JobShape, got: int, nodes: int = 0) -> str:
    """What `auto` would choose where the run does not choose it: a set split, or ranks per
    node the profile fixes (the candidates they leave); "" when it is the same split."""
    free = replace(shape, ranks_auto=True)
    other = choose_split(_auto(c), free)
    o = other.chosen()
    if o is None or o.key == (nodes, got):
        return ""
    mine = plan_option(c, shape, got, nodes)  # the run's own layout on its own ranks
    vs = f" against {dur(mine.step_s)}" if mine.step_s else ""
    how = ("" if shape.ranks_auto else " with slurm.tasks_per_node: auto")
    return f"; auto{how} would choose {_pair(o)}, step {dur(o.step_s)}{vs}"


def _roles(c: TrainConfig, ch: SplitChoice, shape: JobShape) -> str:
    """The best node-roles layout where `auto` chose a per-node split over it (or, with
    trainer/plan/topology.py ROLES_RUN off, without weighing it)."""
    o = choose_split(c, shape, roles=True).best_roles()
    if ch.generation_nodes or o is None:
        return ""
    n, mine = o.generation_nodes, ch.chosen()
    vs = f" against {mine.step_s:,.0f} s" if mine is not None and mine.step_s else ""
    return (f"; node roles{'' if ROLES_RUN else ' (planned, not chosen by auto)'}: best {n} "
            f"generation + {shape.nodes - n} training nodes, step {o.step_s:,.0f} s{vs}")


def split_lines(c: TrainConfig, shape: JobShape) -> list[str]:
    """One line on the run's layout (a split per node, or node roles), or none where there is
    no layout to choose (not vLLM, one node of one GPU or unknown GPUs)."""
    if not (split_choices(c, replace(shape, ranks_auto=True)) or set_roles(c) is not None):
        return []
    try:
        t = topology(c, shape)
    except TopologyError:
        return []  # the validation's line says why
    g = len(t.generation)
    head = f"  {t.layout()}"
    set_to = c.rollout.vllm.generation_gpus
    if set_roles(c) is not None:
        return [f"{head} (rollout.vllm.generation_nodes as set)"
                + _elsewhere(c, shape, g, t.generation_nodes)]
    if set_to != "auto":
        how = "as set" if set_to is not None else "null: half"
        return [f"{head} (rollout.vllm.generation_gpus {how}){_elsewhere(c, shape, g)}"]
    ch = choose_split(c, shape)
    pinned = ("" if shape.ranks_auto else
              f", among the splits that leave each of slurm.tasks_per_node "
              f"{shape.ranks_per_node} ranks a GPU")
    mine = ch.chosen()
    step = f": step {dur(mine.step_s)}" if mine is not None and mine.step_s else ""
    near = ", ".join(_option(o) for o in ch.neighbours())
    return [f"{head} (rollout.vllm.generation_gpus {ch.why}{pinned}){step}"
            + (f"; neighbours {near}" if near else "") + _roles(c, ch, shape)
            + _elsewhere(c, shape, g, t.generation_nodes)]


def split_json(c: TrainConfig, shape: JobShape) -> Optional[dict[str, Any]]:
    """`resources.split` of `sweep --dry-run --json`: the split, how it was chosen, and every
    candidate `auto` weighed (with step_s and train_gib_per_gpu, or why it is out)."""
    if not (split_choices(c, replace(shape, ranks_auto=True)) or set_roles(c) is not None):
        return None
    try:
        t = topology(c, shape)
    except TopologyError:
        return None
    set_to = c.rollout.vllm.generation_gpus
    ch: SplitChoice = choose_split(_auto(c) if set_to != "auto" else c, shape)
    weighed = choose_split(_auto(c) if set_to != "auto" else c, shape, roles=True)
    options = ch.options + tuple(o for o in weighed.options
                                 if o.generation_nodes and o not in ch.options)
    return {"layout": t.layout(), "generation_nodes": t.generation_nodes or None,
            "generation_gpus": len(t.generation), "training_gpus": len(t.training),
            "ranks_per_node": t.shape.ranks_per_node,
            "set": set_to if set_to != "auto" else None, "why": ch.why,
            "options": [o.to_json() for o in options]}

