"""Trainer adapters: every trainer a study can name, the built-in one included (`trainer:`).

`ADAPTERS` maps each `trainer.kind` to its adapter (the `Adapter` protocol of base.py):
`adapter_for(spec)` builds the one a study's `trainer:` block names, `adapter_of(config)` the
one of a variant's config, `adapter_class(raw)` the class of a run dir's parsed config.yaml (a
job or the analysis, which build nothing from the trainer block). Each adapter lives in its
own module and imports its trainer only when asked to validate, so the modules are imported
here at once and `ablate` still runs without TRL or verl installed.

The adapters import nothing of ablate.studies, ablate.analysis or ablate.cli
(tests/test_layer_direction.py): the study layer and the analysis both call them.

    base.py       the `trainer:` block and the Adapter protocol
    builtin/      the built-in trainer (trainer/); its __init__ is the one door ablate's other
                  modules go through into trainer/ (rundir.py aside)
    foreign.py    what a trainer run as a program shares: trl.py (trl_entry.py: one TRL run
                  from flags), verl.py, command.py (any program)
    study.py      those trainers' studies: flat keys, their base config and runs
    runner.py     runs one variant on such a trainer and follows its log; child.py: its
                  process, in a process group of its own
    curve.py      reads its curve; budget.py: the budgets ablate measures for it
"""

from __future__ import annotations

from typing import Any

from ablate.adapters.base import Adapter, NoPlan, TrainerSpec
from ablate.adapters.builtin import BuiltinAdapter
from ablate.adapters.command import CommandAdapter
from ablate.adapters.foreign import ForeignAdapter
from ablate.adapters.trl import TRLAdapter
from ablate.adapters.verl import VerlAdapter
from ablate.study_record import StudyFit

# `trainer.kind` -> its adapter (TrainerSpec.kind lists the same names)
ADAPTERS: dict[str, Any] = {
    "ablate": BuiltinAdapter,
    "trl": TRLAdapter,
    "verl": VerlAdapter,
    "command": CommandAdapter,
}


def adapter_for(spec: TrainerSpec) -> Adapter:
    """The adapter of a study's `trainer:` block (InputError: what the block lacks)."""
    return ADAPTERS[spec.kind].from_spec(spec)


def adapter_of(config: Any) -> Adapter:
    """The adapter of a variant's config: another trainer's names its `trainer:` block, the
    built-in trainer's TrainConfig has none."""
    return adapter_for(getattr(config, "trainer", None) or TrainerSpec())


def kind_of(raw: Any) -> str:
    """The trainer kind of a parsed config (a run's config.yaml, a variants.json entry) or of
    a study's parsed `trainer:` block wrapped as {"trainer": block}: the built-in's by default."""
    trainer = raw.get("trainer") if isinstance(raw, dict) else None
    return str(trainer.get("kind", "ablate")) if isinstance(trainer, dict) else "ablate"


def adapter_class(raw: Any) -> Any:
    """The adapter class of a parsed config, its static parts (`job_config`, `run`, `curve`,
    `fit_defaults`) usable without building it. A kind no adapter has goes the way of other
    trainers, whose runner refuses the config in one line (it was written by hand)."""
    return ADAPTERS.get(kind_of(raw), ForeignAdapter)


def fit_columns(trainer: dict[str, Any], fit: dict[str, Any]) -> StudyFit:
    """A study's `fit:` (the keys it sets) with its trainer's default columns filled in (its
    adapter's `fit_defaults`): what the study dir records at submit, and what the fit of an
    older study dir (study.yaml alone) resolves to when it is read."""
    return StudyFit(**adapter_class({"trainer": trainer}).fit_defaults(trainer, fit))


def memory_plan(config: Any, shape: Any) -> Any:
    """The run's memory plan, or NoPlan saying its trainer has none (the dry run prints it)."""
    adapter = adapter_of(config)
    if adapter.memory_plan is None:
        return NoPlan(adapter.kind)
    return adapter.memory_plan(config, shape)


def time_plan(config: Any, shape: Any, limits: Any) -> Any:
    """The run's time plan, or None where its trainer has none (it sizes itself)."""
    adapter = adapter_of(config)
    return None if adapter.time_plan is None else adapter.time_plan(config, shape, limits)


def topology(config: Any, shape: Any) -> Any:
    """Where the run's ranks and engines go (trainer/plan/topology.py), or None where its
    trainer has no plan here or the shape holds no layout (the trainer refuses it at start)."""
    adapter = adapter_of(config)
    if adapter.topology is None:
        return None
    try:
        return adapter.topology(config, shape)
    except ValueError:  # TopologyError: no layout on this shape
        return None


def split_lines(config: Any, shape: Any) -> list[str]:
    """The dry run's line on the run's GPU split, or none where its trainer has no layout."""
    adapter = adapter_of(config)
    return [] if adapter.split_lines is None else adapter.split_lines(config, shape)


def split_json(config: Any, shape: Any) -> Any:
    """`resources.split` of the dry run's --json, or None where its trainer has no layout."""
    adapter = adapter_of(config)
    return None if adapter.split_json is None else adapter.split_json(config, shape)


def plans_time(config: Any) -> bool:
    """Whether the config's trainer has a time plan here (ablate plans its own trainer only):
    what the plans that learn from a run's measured rates can re-plan."""
    return config is not None and adapter_of(config).time_plan is not None


__all__ = ["ADAPTERS", "Adapter", "TrainerSpec", "adapter_class", "adapter_for", "adapter_of",
           "kind_of", "memory_plan", "plans_time", "split_json", "split_lines", "time_plan",
           "topology"]
