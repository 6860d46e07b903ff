"""What every trainer adapter provides, and the `trainer:` block of a study that names one.

An adapter turns a study's variant (a flat mapping of the trainer's own keys to values) into
the command that trainer runs, in the trainer's own syntax, and says where that trainer writes
its curve. It never imports its trainer at module import: a study names the trainer, and only
then is the (heavy, optional) package touched, to validate keys.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, Optional, Protocol

from pydantic import Field

from ablate.errors import InputError
from ablate.validation import Strict
from ablate.value_text import value_text


class TrainerSpec(Strict):
    """`trainer:` in a study: which trainer runs the variants and how to call it."""

    kind: Literal["ablate", "trl", "verl", "command"] = Field(
        "ablate", description="ablate: the built-in trainer (axes are TrainConfig paths); trl, "
        "verl: those trainers (axes are their own keys); command: any program (`command:`).")
    command: Optional[str] = Field(
        None, description="kind command: the command line, with {overrides}, {seed}, {run_dir} "
        "and {resume} placeholders. kind trl: a TRL script to run instead of the built-in "
        "entry (`python my_grpo.py`), given `--key value` arguments.")
    resume: str = Field(
        "", description="kind command: what {resume} becomes when the run dir already holds a "
        "previous attempt (e.g. `--resume`); empty on a first attempt.")
    override_style: Literal["argparse", "hydra", "json"] = Field(
        "argparse", description="kind command: how {overrides} is rendered: `--key value`, "
        "Hydra `key=value`, or a JSON file path (config file for tools that take one).")
    keys: Optional[list[str]] = Field(
        None, description="kind command: the keys the program accepts; axes outside it are "
        "refused before anything runs (None: any key).")
    log: Optional[str] = Field(
        None, description="Where the curve is written, relative to the run dir (a JSONL, "
        "trainer_state.json, TensorBoard or MLflow dir). Default: the adapter's own place.")
    config_dir: Optional[str] = Field(
        None, description="kind verl: Hydra config dir to compose with (default: the installed "
        "verl package's verl/trainer/config).")
    config_name: str = Field("ppo_trainer", description="kind verl: the Hydra config name.")
    step_cost: Optional[float] = Field(
        None, gt=0, description="Compute per step when the trainer logs none (fit x = "
        "`compute` = step x step_cost); A and B do not depend on it.")
    stop_when: Optional[dict[str, float]] = Field(
        None, description="A budget on a column the trainer logs (the fit's compute axis, e.g. "
        "`{num_tokens: 5.0e+7}` for TRL): each run is stopped, with `stop_signal`, once its "
        "JSONL log reaches this value, and is done. One column.")
    stop_signal: Literal["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2"] = Field(
        "SIGTERM", description="What the trainer's process group gets when ablate stops it: on "
        "Slurm's preemption signal (USR2, then the job is requeued and resumes through the "
        "trainer's checkpoint flag) and when a gpu_hours budget is reached. A trainer that "
        "saves on it loses nothing; ablate's TRL entry saves at the next step and exits.")
    stop_grace_s: float = Field(
        120.0, gt=0, description="Seconds the trainer has to save and exit after the stop "
        "signal before it is killed (keep below Slurm's signal lead time).")


class Adapter(Protocol):
    """One trainer. `check_key` runs before anything is submitted; `argv` at job start. Each
    adapter module also has SCALERL: ablate key -> (its key or None, how), which `check_key`
    uses to refuse an ablate key with the trainer's own, or with why it cannot express it."""

    kind: str
    default_log: str

    def check_key(self, key: str, where: str) -> None:
        """Raise InputError (one line, nearest valid key) when `key` is not the trainer's."""

    def check_overrides(self, overrides: dict[str, Any], where: str) -> None:
        """Validate a whole variant (e.g. compose it with the trainer's config)."""

    def steps_key(self) -> str:
        """The trainer key the study's `budget.steps` sets."""

    def argv(self, overrides: dict[str, Any], seed: int, run_dir: Path, resume: bool) -> list[str]:
        """The command that trains this variant into `run_dir`."""


def refuse_scalerl_key(key: str, where: str, trainer: str,
                       scalerl: dict[str, tuple[Optional[str], str]]) -> None:
    """An ablate ScaleRL key on another trainer's study: one line naming that trainer's key for
    it, or saying the trainer cannot express it (each adapter's SCALERL table)."""
    if key in scalerl:
        theirs, how = scalerl[key]
        if theirs is None:
            raise InputError(f"{where}: '{key}' cannot be expressed in {trainer}: {how}")
        raise InputError(f"{where}: '{key}' is an ablate key; in {trainer} use '{theirs}' ({how})")


def nearest(word: str, options: list[str]) -> str:
    """`(did you mean 'x'?)`, else a short list of valid keys."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"(did you mean '{close[0]}'?)"
    shown = ", ".join(sorted(options)[:10])
    return f"(valid: {shown}, ...)" if len(options) > 10 else f"(valid: {shown})"


def argparse_args(overrides: dict[str, Any]) -> list[str]:
    """`--key value` pairs (TRL / HfArgumentParser / argparse scripts); each value one word
    (`value_text`: true/false, null, JSON for lists and mappings)."""
    out: list[str] = []
    for k, v in overrides.items():
        out += [f"--{k}", value_text(v)]
    return out


def hydra_args(overrides: dict[str, Any]) -> list[str]:
    """Hydra `key=value` overrides (verl); lists as Hydra lists `[a,b]`."""
    out = []
    for k, v in overrides.items():
        if isinstance(v, list):
            out.append(f"{k}=[{','.join(value_text(x) for x in v)}]")
        else:
            out.append(f"{k}={value_text(v)}")
    return out
