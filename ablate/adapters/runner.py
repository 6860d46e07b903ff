"""Run one variant on another trainer and follow its log (its curve is read by `curve`).

The job (ablate/studies/launch/job.py) calls the adapter's `run`, which calls `run_foreign`,
for a run dir whose config.yaml names another trainer. The trainer runs as a child process
(its output in `<run_dir>/trainer.log`); while it runs, the last step of its log is copied
into status.json every few seconds, so `ablate status` shows the step from the trainer's own
log.

Stopping it (ablate/adapters/child.py sends `trainer.stop_signal` to its process group):
  * preemption: Slurm's USR2 sets the job's preemption flag (trainer/dist/preempt.py); the runner
    stops the trainer, records the stop in status.json (`preemptions`) and marks the attempt
    stopped, so the job hands over to submitit, which requeues it; the next attempt resumes
    through the trainer's own checkpoint flag.
  * a gpu_hours budget (wall time x devices, summed over attempts in status.json) is spent,
    or the log's `trainer.stop_when` column reached its value: the trainer is stopped and the
    run is done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ablate.adapters import child
from ablate.adapters.budget import devices, gpu_hours_limit, stop_when_reached
from ablate.adapters.curve import log_path
from ablate.adapters.study import ForeignConfig
from ablate.adapters.builtin import preempt
from trainer.rundir import read_status, write_status

POLL_S = 2.0  # status.json from the trainer's log
SIGNAL_POLL_S = 0.05  # the preemption flag
CHECK_S = 0.5  # budgets ablate measures (gpu_hours, trainer.stop_when)


def _resume(cfg: ForeignConfig, run_dir: Path) -> bool:
    """A retry resumes through the trainer's own checkpoint: TRL only once one exists (TRL
    refuses `resume_from_checkpoint` without one); others once an attempt has started."""
    if cfg.trainer.kind == "trl":
        return any((run_dir / "trl").glob("checkpoint-*"))
    return (run_dir / ".attempted").exists()


def last_logged_step(path: Path) -> Optional[int]:
    """The last "step" of a JSONL log (read from its tail), else None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


@dataclass
class Attempt:
    """One attempt of a run on another trainer, as the runner follows it."""

    cfg: ForeignConfig
    run_dir: Path
    default_log: str  # the adapter's place for the curve (curve.log_path)
    argv: list[str]
    step: int
    spent_h: float  # gpu_hours of earlier attempts (status.json)
    notes: dict[str, Any]  # kept in status.json: preemptions, stopped
    t0: float = field(default_factory=time.monotonic)

    def gpu_hours(self) -> float:
        return self.spent_h + (time.monotonic() - self.t0) * devices() / 3600

    def status(self, state: str, **extra: Any) -> None:
        write_status(self.run_dir, state, self.step, command=self.argv,
                     gpu_hours=round(self.gpu_hours(), 6), **self.notes, **extra)

    def poll_log(self) -> None:
        self.step = last_logged_step(self.log()) or self.step

    def log(self) -> Path:
        return log_path(self.cfg, self.run_dir, self.default_log)


def run_foreign(raw: dict[str, Any], run_dir: Path, adapter_class: Any) -> None:
    """Train one run dir with its trainer (`adapter_class`: its adapter, ADAPTERS[kind]); raise
    when the trainer exits non-zero. On Slurm's preemption signal the trainer is stopped (it
    may save) and the job requeues it; with a gpu_hours budget or `trainer.stop_when` it is
    stopped when that is reached."""
    cfg = ForeignConfig.model_validate(raw)
    prev = read_status(run_dir)
    default_log = adapter_class.default_log
    run = Attempt(cfg, run_dir, default_log, list(prev.get("command") or []),
                  last_logged_step(log_path(cfg, run_dir, default_log)) or 0,
                  float(prev.get("gpu_hours") or 0.0),
                  {k: prev[k] for k in ("preemptions",) if k in prev})
    limit = gpu_hours_limit(cfg.budget)
    spent = budget_reached(run, limit)
    if spent is not None:  # spent before a requeue or a rerun: nothing to run
        run.status("done", stopped=spent)
        return
    adapter = adapter_class.from_spec(cfg.trainer)
    run.argv = adapter.argv(adapter.run_overrides(cfg), cfg.seed, run_dir, _resume(cfg, run_dir))
    (run_dir / ".attempted").touch()
    env = dict(os.environ, **getattr(adapter, "env", lambda d: {})(run_dir))
    run.status("running")
    with open(run_dir / "trainer.log", "ab") as out:
        proc = child.start(run.argv, out, env, run_dir)
        try:
            why = follow(run, proc, limit)
        finally:  # the job itself was stopped (or follow failed): leave no trainer behind
            code = child.stop(proc, cfg.trainer.stop_signal, cfg.trainer.stop_grace_s)
    run.poll_log()
    finish(run, why, code)


def follow(run: Attempt, proc: subprocess.Popen, limit: float | None) -> str | None:
    """Copy the trainer's step into status.json until it exits (None), the job gets the
    preemption signal ("preempted", seen within SIGNAL_POLL_S) or a budget ablate measures is
    reached (why, checked every CHECK_S: the gpu_hours, the `stop_when` column)."""
    last_check = last_status = time.monotonic()
    while proc.poll() is None:
        if preempt.requested():  # stop at once: each step more is a step redone
            run.poll_log()
            return "preempted"
        now = time.monotonic()
        if now - last_check >= CHECK_S:
            last_check = now
            why = budget_reached(run, limit)
            if why is not None:
                run.poll_log()
                return why
        if now - last_status >= POLL_S:
            last_status = now
            run.poll_log()
            run.status("running")
        time.sleep(SIGNAL_POLL_S)
    return None


def budget_reached(run: Attempt, limit: float | None) -> str | None:
    if limit is not None and run.gpu_hours() >= limit:
        return f"gpu_hours budget {limit:g} reached"
    return stop_when_reached(run.cfg.trainer, run.log())


def finish(run: Attempt, why: str | None, code: int) -> None:
    """status.json after the trainer ended; for a preemption, tell the job to requeue."""
    if why == "preempted":
        run.notes["preemptions"] = [*run.notes.get("preemptions", []),
                                    {"stopped_at_step": run.step, "exit": code}]
        run.status("running")  # the requeued job resumes it through the trainer's checkpoint
        preempt.mark_stopped(run.step)  # job.py hands over to submitit: requeue
        print(f"stop signal: {run.cfg.trainer.kind} trainer stopped at step {run.step} "
              f"(exit {code}); the job is requeued", file=sys.stderr, flush=True)
        return
    if why is not None:  # a budget: stopped by ablate, so its exit status is no verdict
        run.status("done", stopped=f"{why} (exit {code})")
        return
    if code != 0:
        tail = (run.run_dir / "trainer.log").read_text(errors="replace")[-600:].strip().splitlines()
        run.status("failed")
        raise RuntimeError(f"{run.argv[0]} exited {code}: {tail[-1] if tail else ''}")
    run.status("done")
