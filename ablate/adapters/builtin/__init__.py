"""The built-in trainer (`trainer/`, kind `ablate`) as an adapter, like TRL, verl and command.

This `__init__` is its public face, the one door from ablate into trainer/ (trainer/rundir.py,
the run dir's on-disk contract, aside): a module outside this folder imports what it needs from
here, never a trainer module nor one of this folder's (tests/test_layers.py holds it). What
depends on a variant's trainer is asked of its adapter (`ablate.adapters.adapter_of(config)`:
problems, memory and time plans, topology, the dry run's split lines, the GPU check); what is
named here is the vocabulary every executor speaks whichever trainer it runs (the job's shape,
limits, durations, the preemption flag, the `budget:` section) and what only a built-in run has
(its recipes and keys, the plans the sizing and the rates-learning re-plans read, `ablate run`).

    adapter.py      BuiltinAdapter: load, expand, check, run, curve, and the plans, each a
                    call into trainer/; it trains in the job's own process (`trainer:run`),
                    so it has no command to show, and its curve is metrics.jsonl
    config_paths.py TrainConfig paths: which dotted keys axes and overrides may set
    provenance.py   a base: a chain of recipes, each value with its file:line
    study.py        a built-in study loaded, checked and expanded into configs and run ids
    split_text.py   the dry run's line on a run's GPU split (its `split_lines`, `split_json`)
    gpu_check.py    whether a run needs GPUs where its jobs get none (its `gpu_reason`)
    replan.py       a run not started re-planned on the rates others measured (its `replan`)
"""

from __future__ import annotations

# the job's shape, limits and durations: every executor's vocabulary, whichever trainer it runs
from trainer.plan.time_jobs import Limits, TimePlan, dur
from trainer.plan.time_model import GPUS
from trainer.plan.topology import JobShape
# the preemption flag a job and the trainer in its process share (stop signals, safe points)
from trainer.dist import preempt
# a study's budget, its stages' and a search space's rungs: the trainer's `budget:` section
from trainer.config import BudgetConfig

from ablate.adapters.builtin.adapter import BuiltinAdapter, recipe_keys, train
from ablate.adapters.builtin.config_paths import check_config_path, leaf_paths
from ablate.adapters.builtin.provenance import (Provenance, find_recipe, load_recipe,
                                                resolve_base, set_path, validate_config)
from ablate.adapters.builtin.study import Assignment, run_id_of
from trainer.plan.memory import advice
# rates.json's fields: what a run's time plan assumed and its steps measured
from trainer.plan.rates import RATES, measured
from trainer.validate import problems

__all__ = [
    "Assignment", "BudgetConfig", "BuiltinAdapter", "GPUS", "JobShape", "Limits", "Provenance",
    "RATES", "TimePlan", "advice", "check_config_path", "dur", "find_recipe", "leaf_paths",
    "load_recipe", "measured", "preempt", "problems", "recipe_keys", "resolve_base", "run_id_of",
    "set_path", "train", "validate_config",
]
