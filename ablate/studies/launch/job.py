"""The callable every job runs: train each of its runs (resuming), requeue on preemption.

A job carries only run-dir paths; the config is read from `<run_dir>/config.yaml`, written at
submission, so what ran is exactly what is on disk. On timeout or preemption submitit calls
`checkpoint()`, which resubmits this same object: the next attempt skips finished runs and
the trainer resumes the unfinished one from its checkpoint.

Preemption keeps work: Slurm's USR2 (sent `signal_delay_s` before the time limit, or on
preemption) would make submitit's own handler requeue at once, killing the trainer mid-step
so the next attempt restarts from the last periodic checkpoint. So the job puts the trainer's
flag handler (trainer/dist/preempt.py) on USR2 and keeps submitit's: the trainer checkpoints at the
next step boundary and returns, and only then is submitit's handler called (rank 0 pickles
this object and runs `scontrol requeue`; other ranks log and return). The trainer honours the
stop inside generation and eval too (trainer/dist/preempt.py), so the wait is for the last finished
step's checkpoint, not for a whole step. Whatever happens the job requeues: `Fallback` calls
submitit's handler itself `requeue_within_s` after the signal if the trainer has not returned
by then (the resume starts from the last checkpoint there is), and a job that ends without a
requeue marks its run `failed` with the reason (never left `running`).

submitit's handler (site-packages/submitit/core/job_environment.py,
SignalHandler.checkpoint_and_try_requeue, installed by JobEnvironment._handle_signals): rank 0
calls our `checkpoint()` (Checkpointable), pickles it, runs `env._requeue` (Slurm: `scontrol
requeue <job>`; local: exit code 144) and `sys.exit(-1)`; no requeue (e.g. "timed-out too many
times") raises UncompletedJobError; other ranks only log.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

import submitit

from ablate.adapters import adapter_class
from ablate.number_text import count
from ablate.adapters.builtin import preempt
from ablate.studies.entry import TRAINER_ENTRY
from trainer.rundir import FINAL_STATES, read_config, read_status, write_status


def set_state(run_dir: Path, state: str, **fields) -> None:
    """Rewrite the run's status.json with a new state, keeping the trainer's other fields
    (step, error, ...) and adding `fields`."""
    status = read_status(run_dir)
    keep = {k: v for k, v in status.items() if k not in ("state", "step", "updated", "pid")}
    write_status(run_dir, state, status.get("step", 0), **{**keep, **fields})


USER_STOPS = ("SIGINT", "SIGTERM")  # stops a user asks for (local jobs): cost no attempt


def mark_stopped(run_dir: Path) -> None:
    """The run stopped at its last checkpoint because the user asked (SIGINT/SIGTERM): state
    "stopped", the stop recorded in the preemption record the trainer carries over attempts
    (`signal` on its last entry; a stop before the trainer noted one gets its own), so that
    ablate.studies.status does not count the attempt against max_attempts."""
    status = read_status(run_dir)
    stops = list(status.get("preemptions") or [])
    sig = preempt.signal_name() or "SIGINT"
    if stops and stops[-1].get("checkpoint_step") == preempt.stopped_at():
        stops[-1] = {**stops[-1], "signal": sig}
    else:
        stops.append({"signal": sig, "checkpoint_step": preempt.stopped_at()})
    set_state(run_dir, "stopped", preemptions=stops, error=None, traceback=None)


def user_stops(status: dict) -> int:
    """How many of a run's attempts ended in a stop the user asked for."""
    return sum(isinstance(p, dict) and p.get("signal") in USER_STOPS
               for p in status.get("preemptions") or [])


def load_entry(spec: str) -> Callable:
    """'module:function' -> the function (lets tests swap in a tiny job; default trainer:run)."""
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


@contextlib.contextmanager
def stdout_to_stderr():
    """Run in-process jobs with stdout sent to stderr (fd level too), so `--json` output stays
    pure even when a library logs to stdout (deepspeed does, imported via transformers)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


class RunJob(submitit.helpers.Checkpointable):
    """Train `run_dirs` one after another; a failing run is recorded and the rest still run."""

    def __init__(self, run_dirs: list[str], entry: str = TRAINER_ENTRY,
                 requeue_within_s: float | None = None) -> None:
        """`requeue_within_s`: after a stop signal, requeue at the latest this many seconds
        later (the Slurm profile's signal_delay_s less a margin); None: wait for the trainer."""
        self.run_dirs = [str(d) for d in run_dirs]
        self.entry = entry
        self.requeue_within_s = requeue_within_s

    def __call__(self) -> list[str]:
        # A multi-task job's ranks find each other in the trainer (`trainer.dist.groups.read_env`
        # reads Slurm's variables), the one place that decides rank, world and master address.
        env = submitit.JobEnvironment()
        fn = load_entry(self.entry)
        # Decided once, up front, so every rank of a multi-task job runs the same runs even
        # after rank 0 marks one done.
        todo = [d for d in map(Path, self.run_dirs) if read_status(d).get("state") not in FINAL_STATES]
        requeue = preempt.install(signal.SIGUSR2)  # submitit's handler, called after the save
        fallback = Fallback(requeue, getattr(self, "requeue_within_s", None), env.global_rank,
                            lambda: self.current)
        self.current: Path | None = None
        try:
            failed = self.train_all(todo, fn, env.global_rank, self)
        finally:
            fallback.cancel()
            if requeue is not None:
                signal.signal(signal.SIGUSR2, requeue)
        if preempt.stopped_at() is not None and preempt.signal_name() in USER_STOPS:
            if env.global_rank == 0 and self.current is not None:
                mark_stopped(self.current)  # a stop the user asked for: no requeue
        elif preempt.stopped_at() is not None and not fallback.fired:
            # rank 0: requeue and exit; other ranks return
            hand_over(requeue, self.current if env.global_rank == 0 else None)
        elif failed:
            raise RuntimeError(f"{count(len(failed), 'run')} failed: " + "; ".join(failed))
        return self.run_dirs

    @staticmethod
    def train_all(todo: list[Path], fn: Callable, global_rank: int, job=None) -> list[str]:
        """Train each run in turn, through the adapter of the trainer its config.yaml names
        (ablate/adapters: the built-in trainer calls `fn`, the job's entry point; another runs
        as a child process); returns the failures. Stops early when the trainer stopped a run
        for a preemption signal (checkpointed: the requeued job resumes it)."""
        failed: list[str] = []
        for d in todo:
            if job is not None:
                job.current = d
            raw = read_config(d)
            adapter = adapter_class(raw)  # the trainer's: ablate/adapters
            config = adapter.job_config(raw)
            if global_rank == 0:  # running from now on, not from the trainer's first step
                set_state(d, "running")
            try:
                adapter.run(config, d, fn)
                if preempt.stopped_at() is not None:
                    break
                if global_rank == 0 and read_status(d).get("state") not in FINAL_STATES:
                    # Returned normally = finished, whatever the entry point wrote (or not).
                    set_state(d, "done")
            except KeyboardInterrupt:  # a second Ctrl-C: stopped, resumable all the same
                if global_rank == 0:
                    mark_stopped(d)
                raise
            except Exception as e:  # noqa: BLE001 - recorded in the run dir, then re-raised
                if global_rank == 0:
                    set_state(d, "failed", error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc()[-4000:])
                failed.append(f"{d.name}: {type(e).__name__}: {e}")
        return failed


def hand_over(handler, run_dir: Path | None) -> None:
    """The trainer checkpointed because of USR2: now let submitit's own handler do what it
    does on that signal (rank 0: pickle the job, `scontrol requeue`, exit; other ranks: log
    and return). When that does not requeue (submitit gave up, or no submitit handler is
    installed), rank 0 marks the run `failed` with why, so it is never left `running`."""
    if not callable(handler):
        _not_requeued(run_dir, "no submitit handler to requeue the job (not run by submitit)")
        return
    try:
        handler(signal.SIGUSR2, None)
    except SystemExit:
        raise  # requeued (submitit exits after `scontrol requeue`)
    except BaseException as e:
        _not_requeued(run_dir, f"{type(e).__name__}: {e}")
        raise


def _not_requeued(run_dir: Path | None, why: str) -> None:
    """Rank 0 (run_dir given): the run stopped for a signal and the job is not requeued."""
    if run_dir is not None and read_status(run_dir).get("state") not in FINAL_STATES:
        set_state(run_dir, "failed", error=f"stopped by a stop signal; not requeued: {why}")


class Fallback:
    """Requeue even when the trainer misses the signal's window: `within_s` after the stop
    signal (Slurm kills the job `signal_delay_s` after it), if the trainer has not returned,
    call submitit's handler from this thread (it checkpoints the job object and requeues:
    the resume starts from the last checkpoint there is), then end the process (the
    requeue's kill would come anyway; a second requeue by the trainer's return must not).
    Rank 0 only: submitit requeues from rank 0, the other ranks are killed with the job."""

    def __init__(self, handler, within_s: float | None, global_rank: int,
                 run_dir: Callable[[], Path | None]) -> None:
        self.handler, self.within_s, self.run_dir = handler, within_s, run_dir
        self.fired = False
        self.done = threading.Event()
        if within_s is not None and global_rank == 0 and callable(handler):
            threading.Thread(target=self._watch, name="ablate-requeue-fallback",
                             daemon=True).start()

    def cancel(self) -> None:
        """The trainer returned (in time): nothing to do."""
        self.done.set()

    def _watch(self) -> None:
        while not self.done.wait(0.5):
            age = preempt.signal_age()
            if age is not None and age >= self.within_s:
                self._fire(age)
                return

    def _fire(self, age: float) -> None:
        self.fired = True
        d = self.run_dir()
        print(f"[ablate] stop signal {age:.0f} s ago and the trainer has not checkpointed: "
              "requeueing from the last checkpoint", file=sys.stderr, flush=True)
        code = 1
        try:
            self.handler(signal.SIGUSR2, None)
        except SystemExit as e:  # requeued: submitit exits after the requeue
            code = e.code if isinstance(e.code, int) else 1
            if d is not None and read_status(d).get("state") not in FINAL_STATES:
                set_state(d, "running", requeued="fallback: the trainer missed the signal window")
        except BaseException as e:  # noqa: BLE001 - not requeued: say so, then end
            _not_requeued(d, f"{type(e).__name__}: {e}")
        sys.stderr.flush()
        os._exit(code)
