"""Budgets of studies on other trainers: which limits map onto a trainer ablate does not run.

  * steps: passed as the trainer's own key (TRL `max_steps`, verl
    `trainer.total_training_steps`, a command's `steps`); the trainer stops itself.
  * gpu_hours: measured by ablate, as its own trainer counts them (wall time x devices), over
    the child trainer's whole life across attempts; when reached, the runner sends the
    trainer its stop signal (`trainer.stop_signal`: it saves and exits, as on preemption).
  * flops: refused. Other trainers log no FLOPs per step (TRL writes `total_flos` only when
    training ends), so there is nothing to stop on; a budget in the fit's x column is a
    budget in steps once `trainer.step_cost` states the cost of a step.

A budget on the fit's compute axis as the trainer logs it (TRL's `num_tokens`) is
`trainer.stop_when: {column: value}`: the runner reads the column from the JSONL log while the
trainer runs and stops it when the value is reached.

Stages (`stages:`) use the same limits, so an adaptive study runs on steps or gpu_hours.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ablate.errors import InputError

SUPPORTED = ("steps", "gpu_hours")


def check_budgets(doc: Any, study: Any, adapter: Any) -> None:
    """Refuse a study budget or stage budget the trainer cannot be held to, and an axis on the
    trainer's steps key when the budget sets the steps (the budget would silently win)."""
    kind = study.trainer.kind
    check_stop_when(doc, study.trainer, adapter.default_log)
    found = [(("budget",), study.budget)] if study.budget is not None else []
    if study.stages is not None:
        found += [(("stages", "budgets", str(i)), b) for i, b in enumerate(study.stages.budgets)]
    for path, b in found:
        bad = sorted(set(b.model_dump(exclude_none=True)) - set(SUPPORTED))
        if bad:
            raise InputError(
                f"{doc.where(path)}: trainer kind {kind} cannot be held to a {bad[0]} budget "
                f"(it logs none per step); use steps (passed as {adapter.steps_key()}) or "
                "gpu_hours (wall time x devices, measured by ablate)")
    if study.budget is not None and study.budget.steps is not None:
        key = adapter.steps_key()
        if key in study.axes:
            raise InputError(f"{doc.where(('axes', key))}: '{key}' is set by the study's "
                             "budget.steps; vary the budget in another study, or drop `budget`")


def check_stop_when(doc: Any, spec: Any, default_log: str) -> None:
    """`trainer.stop_when`: one column, a positive value, and a JSONL log to read it from."""
    when = spec.stop_when
    if when is None:
        return
    where = doc.where(("trainer", "stop_when"))
    if len(when) != 1:
        raise InputError(f"{where}: trainer.stop_when names one logged column and its "
                         f"value (e.g. {{num_tokens: 5.0e+7}}), got {len(when)}")
    (col, val), = when.items()
    if not val > 0:
        raise InputError(f"{where}: trainer.stop_when.{col} must be above 0, got {val}")
    log = spec.log or default_log
    if not log.endswith(".jsonl"):
        raise InputError(f"{where}: trainer.stop_when is read from a JSONL log while the run "
                         f"goes; trainer.log is {log} (set it to the trainer's JSONL file)")


def stop_when_reached(spec: Any, log: Path) -> str | None:
    """Why to stop, once the log's last value of the `stop_when` column reached it."""
    if spec.stop_when is None:
        return None
    (col, limit), = spec.stop_when.items()
    got = last_logged(log, col)
    return f"{col} {limit:g} reached ({got:g} logged)" if got is not None and got >= limit else None


def last_logged(path: Path, column: str, tail: int = 65536) -> float | None:
    """The last value of `column` in a JSONL log, read from its tail (None: not logged yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            value = json.loads(line).get(column)
        except (ValueError, AttributeError):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def devices() -> int:
    """Devices the job holds, for gpu_hours = wall x devices: the GPUs this node sees times
    the job's nodes (the child trainer uses the whole job, as ablate's own trainer counts it:
    trainer/plan/topology.py Topology.devices); a CPU job counts as one device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    gpus = len([d for d in visible.split(",") if d.strip()]) if visible and visible != "-1" \
        else int(os.environ.get("SLURM_GPUS_ON_NODE", "0") or 0)
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
    return max(1, gpus * nodes)


def gpu_hours_limit(budget: Any) -> float | None:
    """The gpu_hours limit of a run's budget (None: the trainer stops itself)."""
    return None if budget is None else budget.gpu_hours
