"""The study directory, and the only code that reads or writes its own files.

    <results>/<study>/study.yaml               the study file as submitted (verbatim)
    <results>/<study>/study.json               the study as resolved at submit (study_record.py)
    <results>/<study>/variants.json            [{"run_id", "name", "seed", "config"}], the expansion
    <results>/<study>/submissions.json         {run_id: {"attempts", "jobs": [...], "submitted_at"}}
    <results>/<study>/stages.json              adaptive studies: {"budgets", "decisions": [...]}
    <results>/<study>/stage_submissions.json   earlier stages' submission records, kept
    <results>/<study>/.lock                    held by the one `ablate sweep` submitting
    <results>/<study>/_submitit/               the jobs' scripts and stdout/stderr logs
    <results>/<study>/<run_id>/                one run dir (trainer.rundir owns its files)

Why a bottom-layer module: the orchestrator (ablate.studies) writes these files, and the
analysis, the report and the CLI read them (a study's name, fit, trainer and stages through
`read_record`, never by parsing study.yaml themselves); living here (importing nothing of
studies, cli, analysis or adapters), every reader goes through one owner without importing the
layer that submits jobs.
A run dir's files are read and written only through trainer.rundir: the store hands each run
its config and identity there, so the trainer never reads this study dir.

status.json / metrics.jsonl / checkpoint/ are the truth about a run; submissions.json only
says which job to ask the scheduler about. Every file is written atomically (temp file +
rename) so a crash never leaves half a record, and submissions.json is updated under a lock so
concurrent recorders lose nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

import yaml

from ablate.errors import InputError
from ablate.study_record import StudyRecord, from_study_yaml
from trainer import rundir
from trainer.rundir import atomic_write

STUDY, VARIANTS, SUBMISSIONS = "study.yaml", "variants.json", "submissions.json"
RECORD = "study.json"
STAGES, STAGE_SUBMISSIONS, SUBMITIT = "stages.json", "stage_submissions.json", "_submitit"
PROBLEM_STATES = ("failed", "diverged", "interrupted", "cancelled")  # a run that needs a look


class RunSpec(Protocol):
    """What the store needs of one expanded run (ablate.studies.expand.Variant is one)."""

    run_id: str
    name: str
    seed: int
    config: Any

    def to_json(self) -> dict[str, Any]: ...


@dataclass
class RunState:
    """One run of a study as `ablate status` shows it: the run dir's state, refined by the
    scheduler's view of its last job (ablate.studies.status derives it)."""

    run_id: str
    name: str
    seed: int
    state: str
    step: Optional[int]
    job_id: Optional[str]
    attempts: int = 0
    scheduler: Optional[str] = None
    error: Optional[str] = None
    progress: Optional[float] = None  # share of the run's budget spent (steps, FLOPs or hours)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def study_dir_for(results: Path, name: str) -> Path:
    """`results/name`, refusing any name that would land outside `results`."""
    root = results.resolve()
    d = (root / name).resolve()
    if d.parent != root:
        raise InputError(f"study name '{name}' would write outside {results}/ ; use a plain name")
    return d


def is_study_dir(path: Path) -> bool:
    return (Path(path) / VARIANTS).is_file()


def read_variants(study: Path) -> list[dict]:
    """variants.json, checked: a list of {"run_id", "name", ...}; InputError naming the file."""
    f = Path(study) / VARIANTS
    try:
        variants = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{f}: cannot read variants ({e}); expected a JSON list of "
                         '{"run_id", "name", "seed", "config"}') from None
    if not isinstance(variants, list):
        raise InputError(f"{f}: expected a JSON list of runs, got {type(variants).__name__}")
    for i, v in enumerate(variants):
        if not isinstance(v, dict) or "run_id" not in v or "name" not in v:
            raise InputError(f"{f}: entry {i} lacks \"run_id\"/\"name\"; each entry must be "
                             '{"run_id", "name", "seed", "config"}')
    return variants


class StudyStore:
    """Reads and writes one study directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # -- layout ---------------------------------------------------------------------------
    @property
    def variants_path(self) -> Path:
        return self.root / VARIANTS

    @property
    def submissions_path(self) -> Path:
        return self.root / SUBMISSIONS

    @property
    def stages_path(self) -> Path:
        return self.root / STAGES

    @property
    def submitit_dir(self) -> Path:
        return self.root / SUBMITIT

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    # -- writing --------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One `ablate sweep` at a time per study (a second would double-submit)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(f"{self.root}: another `ablate sweep` is submitting this study") from None
            yield

    def write_study(self, study_text: str, record: StudyRecord, variants: list[RunSpec],
                    submitting: frozenset[str] = frozenset()) -> Callable[[], None]:
        """Write study.yaml (`study_text`, as submitted), study.json (`record`, the study as
        resolved), variants.json and each run's config.yaml and identity.json.

        A run's config.yaml is written once and never rewritten while it may be running; a run
        about to be (re)submitted (`submitting`: not running, by the sweep's rules) gets the
        current one, so a setting the run id leaves out (vLLM's GPU share, the micro-batch size,
        the checkpoint cadence, trackers: run_id_of) changed to fix an OOM takes effect when
        the run resumes. Returns an undo that puts the study dir back as it was, for a
        submission the scheduler refuses (bad partition, account...): bad input must leave
        nothing written.
        """
        refreshed = [self.run_dir(v.run_id) / name for v in variants if v.run_id in submitting
                     for name in (rundir.CONFIG, rundir.IDENTITY)]
        refreshed += [self.run_dir(v.run_id) / rundir.IDENTITY for v in variants
                      if v.run_id not in submitting]  # written where missing (older study dirs)
        undo = self._undo([self.root / STUDY, self.root / RECORD, self.variants_path,
                           *refreshed], [self.run_dir(v.run_id) for v in variants])
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / STUDY, study_text)
        atomic_write(self.root / RECORD, record.model_dump_json(indent=1))
        atomic_write(self.variants_path, json.dumps([v.to_json() for v in variants], indent=1))
        for v in variants:
            d = self.run_dir(v.run_id)
            d.mkdir(exist_ok=True)
            if not (d / rundir.CONFIG).exists() or v.run_id in submitting:  # never a running run's
                rundir.write_config(d, v.config)
            if not (d / rundir.IDENTITY).exists() or v.run_id in submitting:
                rundir.write_identity(d, study=self.root.name, variant=v.name, seed=v.seed)
        return undo

    @staticmethod
    def _undo(files: list[Path], dirs: list[Path]) -> Callable[[], None]:
        """A function that restores `files` as they are now and removes those of `dirs` that
        do not exist yet."""
        before = {p: (p.read_text() if p.exists() else None) for p in files}
        new_dirs = [d for d in dirs if not d.exists()]

        def undo() -> None:
            for path, text in before.items():
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    atomic_write(path, text)
            for d in new_dirs:
                shutil.rmtree(d, ignore_errors=True)

        return undo

    @contextlib.contextmanager
    def _records_locked(self) -> Iterator[None]:
        """Blocking lock around a read-modify-write of submissions.json: two recorders (a sweep
        and an adaptive stage, or several jobs) would otherwise each drop the other's entries.
        Its own lock file: `locked()` is held by the whole sweep."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".submissions.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def record_submissions(self, job_ids: dict[str, str], executor: str) -> None:
        """Add one attempt (job id, executor, time) to each run's record."""
        with self._records_locked():
            subs = self.submissions()
            now = time.time()
            for run_id, job_id in job_ids.items():
                rec = subs.setdefault(run_id, {"attempts": 0, "jobs": []})
                rec["attempts"] += 1
                rec["jobs"].append(job_id)
                rec["executor"] = executor
                rec["submitted_at"] = now
            atomic_write(self.submissions_path, json.dumps(subs, indent=1, sort_keys=True))

    def restart_submissions(self, run_ids: list[str], stage: int) -> None:
        """Start the records of `run_ids` afresh (attempts count per stage), keeping the old
        ones in stage_submissions.json under the stage they belonged to."""
        with self._records_locked():
            subs = self.submissions()
            history = {rid: subs.pop(rid) for rid in run_ids if rid in subs}
            if not history:
                return
            atomic_write(self.submissions_path, json.dumps(subs, indent=1, sort_keys=True))
            f = self.root / STAGE_SUBMISSIONS
            old = json.loads(f.read_text()) if f.exists() else []
            atomic_write(f, json.dumps([*old, {"stage": stage, "jobs": history}], indent=1))

    def write_stages(self, budgets: list[dict[str, float]],
                     decisions: list[dict[str, Any]]) -> None:
        """stages.json: the adaptive study's budgets and every decision taken so far."""
        atomic_write(self.stages_path,
                     json.dumps({"budgets": budgets, "decisions": decisions}, indent=1))

    # -- reading --------------------------------------------------------------------------
    def variants(self) -> list[dict[str, Any]]:
        if not self.root.exists():  # a typo: "run sweep first" would send the user astray
            raise InputError(f"{self.root}: no such folder{_near_folder(self.root)}")
        if not self.variants_path.is_file():
            raise InputError(f"{self.root}: not a study directory (no variants.json; run "
                             "`ablate sweep STUDY.yaml` first)")
        return read_variants(self.root)

    def submissions(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.submissions_path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise InputError(f"{self.submissions_path}: unreadable ({e})") from None

    def stages(self) -> dict[str, Any]:
        return read_stages(self.root)

    def record(self) -> StudyRecord:
        return read_record(self.root)

    def study_text(self) -> str:
        return read_study_text(self.root)


# -- the study's record, for every reader (analysis, report, status, stages) -------------------
def read_record(study_dir: Path) -> StudyRecord:
    """study.json, the study as resolved at submit; for a study dir written before it, study.yaml
    read into the same record (ablate/study_record.py `from_study_yaml`; none: the folder's
    name and nothing else). InputError naming the file when it cannot be read."""
    d = Path(study_dir)
    f = d / RECORD
    if f.is_file():
        try:
            return StudyRecord.model_validate_json(f.read_text())
        except (OSError, ValueError) as e:  # pydantic's ValidationError is a ValueError
            raise InputError(f"{f}: unreadable study record ({str(e).splitlines()[0]}); "
                             "`ablate sweep` of the study writes it again") from None
    f = d / STUDY
    text = read_study_text(d)
    try:
        doc = yaml.safe_load(text) if text else {}
    except yaml.YAMLError as e:
        raise InputError(f"{f}: not valid YAML ({str(e).splitlines()[0]})") from None
    return from_study_yaml(doc, str(f), d.name)


def read_study_text(study_dir: Path) -> str:
    """study.yaml as submitted ("" when there is none)."""
    f = Path(study_dir) / STUDY
    return f.read_text() if f.is_file() else ""


# -- stages.json, for every reader (status, compare, report, the controller) -----------------
def read_stages(study_dir: Path) -> dict[str, Any]:
    """stages.json ({"budgets": [], "decisions": []} when there is none)."""
    f = Path(study_dir) / STAGES
    try:
        state = json.loads(f.read_text())
    except FileNotFoundError:
        return {"budgets": [], "decisions": []}
    except ValueError as e:
        raise InputError(f"{f}: unreadable ({e}); delete it to re-decide every stage") from None
    if not isinstance(state, dict) or not isinstance(state.get("decisions"), list):
        raise InputError(f"{f}: expected {{\"budgets\": [...], \"decisions\": [...]}}")
    return state


def stopped_variants(study_dir: Path) -> dict[str, dict[str, Any]]:
    """variant -> {"stage", "budget", "reason"} for every variant an adaptive study stopped
    ({} for other studies); what `status` and `compare` show."""
    return stopped_in(read_stages(study_dir)["decisions"])


def stopped_in(decisions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """variant -> {"stage", "budget", "reason"} of the first decision that stopped it."""
    out: dict[str, dict[str, Any]] = {}
    for d in decisions:
        for v, why in d.get("stopped", {}).items():
            out.setdefault(v, {"stage": d["stage"], "budget": d.get("budget"), "reason": why})
    return out


def adaptive_record(study_dir: Path) -> tuple[dict[str, dict[str, Any]], Optional[dict[str, Any]]]:
    """(stopped variants, stages.json plus the study's `scale_winner`) of a study dir; ({}, None)
    for a study that is not adaptive (or a source that is not a study dir)."""
    source = Path(study_dir)
    if not source.is_dir() or not (source / STAGES).is_file():
        return {}, None
    scale_winner = read_record(source).scale_winner
    return stopped_variants(source), {**read_stages(source), "scale_winner": scale_winner}


def budget_text(budget: dict[str, float] | None) -> str:
    """{"flops": 5e11} -> "flops 5e+11" (how status names a stage's budget)."""
    return ", ".join(f"{k} {v:g}" for k, v in (budget or {}).items()) or "?"


# -- where a run's story is told ---------------------------------------------------------------
def where_to_look(study_dir: Path, s: RunState) -> list[str]:
    """The files that explain a run's end: its status.json (error, traceback) and the job's
    stdout/stderr logs that submitit keeps in the study's _submitit folder."""
    study_dir = Path(study_dir)
    job = (s.job_id or "").split(":")[-1]
    logs = sorted(str(p) for p in (study_dir / SUBMITIT).glob(f"{job}_*log.*")) if job else []
    return [str(study_dir / s.run_id / rundir.STATUS)] + logs


def last_step(run_dir: Path, status: dict[str, Any]) -> Optional[int]:
    """Step from status.json, else from the last complete row of metrics.jsonl."""
    if isinstance(status.get("step"), int):
        return status["step"]
    try:
        row = rundir.last_metrics_row(run_dir)
    except rundir.MetricsError as e:
        raise InputError(str(e)) from None
    try:
        return int(row[rundir.STEP]) if row is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def file_state(status: dict[str, Any]) -> str:
    """A run's state from its status.json alone (no job submitted, or nobody asked the
    scheduler): a final state as written, a failure as failed, anything else pending."""
    fs = status.get("state")
    if rundir.is_final(fs):
        return rundir.RunState(fs).value
    return "failed" if fs == rundir.RunState.FAILED else "pending"


def recorded_states(study_dir: Path) -> list[RunState]:
    """Every run's state as its run dir records it, without asking a scheduler (what a reader
    below the orchestrator, e.g. the report, can know by itself)."""
    out = []
    for v in StudyStore(study_dir).variants():
        d = Path(study_dir) / v["run_id"]
        status = rundir.read_status(d)
        state = file_state(status)
        out.append(RunState(v["run_id"], v["name"], int(v.get("seed", 0) or 0), state,
                            last_step(d, status),
                            None, error=status.get("error") if state == "failed" else None,
                            progress=1.0 if state == "done" else status.get("progress")))
    return out


def _near_folder(path: Path) -> str:
    """`; did you mean X?` when a sibling folder's name is close to the one mistyped."""
    import difflib

    parent = path.parent
    names = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    near = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return f"; did you mean {parent / near[0]}?" if near else ""
