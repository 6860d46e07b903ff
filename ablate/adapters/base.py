"""What every trainer adapter provides, and the `trainer:` block of a study that names one.

Every trainer is an adapter, the built-in one included (ablate/adapters/builtin/): the study
layer, a job and the analysis ask the adapter of the study's trainer kind (`ADAPTERS`) what
they need, and no module outside ablate/adapters asks which trainer it is. Another trainer's
adapter (ablate/adapters/foreign.py) turns a variant (a flat mapping of the trainer's own keys)
into the command that trainer runs, in its own syntax, and says where it writes its curve. An
adapter never imports its trainer at module import: a study names the trainer, and only then
is the (heavy, optional) package touched, to validate keys.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Protocol, Sequence

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
    """One trainer kind, registered in `ADAPTERS` (ablate/adapters/__init__.py).

    A study: `load_base` checks the study's keys and resolves its base config, `check_values`
    refuses a bad axis value at its own line, `point_runs` gives a design point's validated
    config per seed and `run_id` each one's id (ablate/studies/study.py and expand.py). Before
    anything is submitted: `problems` (what the trainer would refuse at its start on a job
    shape: the dry run and `sweep` share it) and `check_fit` (a `fit:` column it never logs).

    Capabilities a trainer may have, None where it has none (the dry run says so):
    `memory_plan(config, shape)`, `time_plan(config, shape, limits)`, `topology(config,
    shape)` (where ranks and engines go; ablate plans its own trainer only), the dry run's
    `split_lines(config, shape)` and `split_json(config, shape)` (the GPUs split between
    engines and ranks), `gpu_reason(config, cores, time_min)` (why a run needs GPUs where its
    jobs would get none), `replan(config, shape, limits, docs, same_variant, configs)` (a run
    not started, its time plan re-made on the rates other runs measured), `time_range(config,
    shape, limits)` (its time plan's range before any has) and `command(config, run_dir)` (the
    command a run executes, for a trainer run as a program).

    Static, for what holds only a run dir's config (nothing built from the trainer block):
    `job_config` and `run` (the job, ablate/studies/launch/job.py), `curve`, `fit_defaults`
    and `reads_own_log` (the analysis, ablate/analysis/gather.py)."""

    kind: str
    reads_own_log: bool  # its curve is in the trainer's own log, which gather's cache cannot see
    memory_plan: Optional[Callable[[Any, Any], Any]]
    time_plan: Optional[Callable[[Any, Any, Any], Any]]
    topology: Optional[Callable[[Any, Any], Any]]
    split_lines: Optional[Callable[[Any, Any], list[str]]]
    split_json: Optional[Callable[[Any, Any], Optional[dict[str, Any]]]]
    gpu_reason: Optional[Callable[[Any, int, float], Optional[str]]]
    replan: Optional[Callable[..., Optional[tuple[Any, str, str]]]]
    time_range: Optional[Callable[[Any, Any, Any], Any]]
    command: Optional[Callable[[Any, Path], str]]

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "Adapter":
        """The adapter of a study's `trainer:` block (InputError: one line, what is missing)."""

    def load_base(self, doc: Any, study: Any, overrides: Sequence[str]
                  ) -> tuple[dict[str, Any], dict, list[Path]]:
        """(base config tree, each value's file:line, recipe files), every key checked."""

    def check_values(self, loaded: Any) -> None:
        """Refuse an axis value the trainer refuses, at its own line, before any run is built."""

    def point_runs(self, loaded: Any, assign: list) -> Iterator[tuple[int, Any]]:
        """(seed, config) of one design point (its axis assignments) for each seed."""

    def run_id(self, config: Any) -> str:
        """The run's id: a hash of what it computes (same config, same run dir)."""

    def problems(self, config: Any, shape: Any) -> list[str]:
        """Why the trainer would refuse this run on a job of this shape (none: [])."""

    def check_fit(self, loaded: Any, fit: dict[str, Any], where: Callable[[str], str]) -> None:
        """Refuse a `fit:` column (`fit`: the study's as written) the trainer never logs."""

    @staticmethod
    def job_config(raw: dict[str, Any]) -> Any:
        """What `run` is given for a run dir's config.yaml, checked before the run is marked
        running (an error here is the job's, not the run's)."""

    @staticmethod
    def run(config: Any, run_dir: Path, entry: Callable[[Any, Path], Any]) -> None:
        """Train one run dir (`entry`: the job's entry point, the built-in trainer's)."""

    @staticmethod
    def curve(run_dir: Path, fit: dict[str, Any]) -> bytes:
        """The run's curve as metrics.jsonl lines (complete ones only; b"" before any)."""

    @staticmethod
    def fit_defaults(trainer: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
        """A study's `fit:` (as written in study.yaml) with the trainer's defaults filled in."""


class NoPlan:
    """The memory plan of a trainer without that capability: none (that trainer sizes
    itself); has the attributes `sweep --dry-run` prints, all empty, and a note saying why."""

    def __init__(self, kind: str) -> None:
        self.note = f"trainer kind {kind}: no memory plan (ablate plans only its own trainer)"
        self.fits = None
        self.train: dict[str, float] = {}
        self.generation: dict[str, float] = {}

    def __getattr__(self, name: str) -> None:  # every other plan field: not known
        return None


def config_hash(config_json: dict[str, Any]) -> str:
    """Short hash of a run's config (as JSON, the seed in it): 12 hex chars, the run id."""
    blob = json.dumps(config_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


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
