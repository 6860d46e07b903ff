"""The study directory on disk: what was asked, what it expanded to, what was submitted.

    <results>/<study>/study.yaml         the study file as submitted (verbatim)
    <results>/<study>/variants.json      [{"run_id", "name", "seed", "config"}], the expansion
    <results>/<study>/submissions.json   {run_id: {"attempts", "jobs": [...], "submitted_at"}}
    <results>/<study>/<run_id>/config.yaml     the resolved TrainConfig the job trains
    <results>/<study>/<run_id>/identity.json   the run's study, variant and seed, for the trainer
A run dir's files are read and written only through trainer.rundir (the store hands each run
its config and identity there, so the trainer never reads this study dir); status.json /
metrics.jsonl / checkpoint/ are the truth about a run; submissions.json only says which job to
ask the scheduler about. Every file is written atomically (temp file + rename) so a crash
never leaves half a record, and submissions.json is updated under a lock so concurrent
recorders lose nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ablate.errors import InputError
from ablate.studies.expand import Variant
from trainer import rundir
from trainer.rundir import atomic_write


def study_dir_for(results: Path, name: str) -> Path:
    """`results/name`, refusing any name that would land outside `results`."""
    root = results.resolve()
    d = (root / name).resolve()
    if d.parent != root:
        raise InputError(f"study name '{name}' would write outside {results}/ ; use a plain name")
    return d


class StudyStore:
    """Reads and writes one study directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # -- layout ---------------------------------------------------------------------------
    @property
    def variants_path(self) -> Path:
        return self.root / "variants.json"

    @property
    def submissions_path(self) -> Path:
        return self.root / "submissions.json"

    @property
    def submitit_dir(self) -> Path:
        return self.root / "_submitit"

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

    def write_study(self, study_text: str, variants: list[Variant],
                    submitting: frozenset[str] = frozenset()) -> Callable[[], None]:
        """Write study.yaml, variants.json and each run's config.yaml and identity.json.

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
        before = {p: (p.read_text() if p.exists() else None)
                  for p in (self.root / "study.yaml", self.variants_path, *refreshed)}
        new_dirs = [self.run_dir(v.run_id) for v in variants if not self.run_dir(v.run_id).exists()]

        def undo() -> None:
            for path, text in before.items():
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    atomic_write(path, text)
            for d in new_dirs:
                shutil.rmtree(d, ignore_errors=True)

        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / "study.yaml", study_text)
        atomic_write(self.variants_path, json.dumps([v.to_json() for v in variants], indent=1))
        for v in variants:
            d = self.run_dir(v.run_id)
            d.mkdir(exist_ok=True)
            if not (d / rundir.CONFIG).exists() or v.run_id in submitting:  # never a running run's
                rundir.write_config(d, v.config)
            if not (d / rundir.IDENTITY).exists() or v.run_id in submitting:
                rundir.write_identity(d, study=self.root.name, variant=v.name, seed=v.seed)
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

    # -- reading --------------------------------------------------------------------------
    def variants(self) -> list[dict[str, Any]]:
        if not self.variants_path.is_file():
            raise InputError(f"{self.root}: not a study directory (no variants.json; run "
                             "`ablate sweep STUDY.yaml` first)")
        from ablate.analysis.gather import read_variants  # one reader/validator for `status` and `fit`

        return read_variants(self.root)

    def submissions(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.submissions_path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise InputError(f"{self.submissions_path}: unreadable ({e})") from None
