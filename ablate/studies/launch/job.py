"""The callable every job runs: train each of its runs (resuming), requeue on preemption.

A job carries only run-dir paths; the config is read from `<run_dir>/config.yaml`, written at
submission, so what ran is exactly what is on disk. On timeout or preemption submitit calls
`checkpoint()`, which resubmits this same object: the next attempt skips finished runs and
the trainer resumes the unfinished one from its checkpoint.

Preemption keeps work: Slurm's USR2 (sent `signal_delay_s` before the time limit, or on
preemption) would make submitit's own handler requeue at once, killing the trainer mid-step
so the next attempt restarts from the last periodic checkpoint. So the job puts the trainer's
flag handler (trainer/preempt.py) on USR2 and keeps submitit's: the trainer checkpoints at the
next step boundary and returns, and only then is submitit's handler called (rank 0 pickles
this object and runs `scontrol requeue`; other ranks log and return). `signal_delay_s` must
cover one step plus a checkpoint.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable

import submitit

from ablate.adapters.study import is_foreign
from trainer import preempt
from trainer.config import TrainConfig
from trainer.rundir import FINAL_STATES, read_config, read_status, write_status


def set_state(run_dir: Path, state: str, **fields) -> None:
    """Rewrite the run's status.json with a new state, keeping the trainer's other fields
    (step, error, ...) and adding `fields`."""
    status = read_status(run_dir)
    keep = {k: v for k, v in status.items() if k not in ("state", "step", "updated", "pid")}
    write_status(run_dir, state, status.get("step", 0), **{**keep, **fields})


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

    def __init__(self, run_dirs: list[str], entry: str = "trainer:run") -> None:
        self.run_dirs = [str(d) for d in run_dirs]
        self.entry = entry

    def __call__(self) -> list[str]:
        # A multi-task job's ranks find each other in the trainer (`trainer.distributed.read_env`
        # reads Slurm's variables), the one place that decides rank, world and master address.
        env = submitit.JobEnvironment()
        fn = load_entry(self.entry)
        # Decided once, up front, so every rank of a multi-task job runs the same runs even
        # after rank 0 marks one done.
        todo = [d for d in map(Path, self.run_dirs) if read_status(d).get("state") not in FINAL_STATES]
        requeue = preempt.install(signal.SIGUSR2)  # submitit's handler, called after the save
        try:
            failed = self.train_all(todo, fn, env.global_rank)
        finally:
            if requeue is not None:
                signal.signal(signal.SIGUSR2, requeue)
        if preempt.stopped_at() is not None:
            hand_over(requeue)  # rank 0: requeue and exit; other ranks return
        elif failed:
            raise RuntimeError("run(s) failed: " + "; ".join(failed))
        return self.run_dirs

    @staticmethod
    def train_all(todo: list[Path], fn: Callable, global_rank: int) -> list[str]:
        """Train each run in turn; returns the failures. Stops early when the trainer stopped
        a run for a preemption signal (checkpointed: the requeued job resumes it)."""
        failed: list[str] = []
        for d in todo:
            raw = read_config(d)
            run, config = foreign_or(fn, raw)
            try:
                run(config, d)
                if preempt.stopped_at() is not None:
                    break
                if global_rank == 0 and read_status(d).get("state") not in FINAL_STATES:
                    # Returned normally = finished, whatever the entry point wrote (or not).
                    set_state(d, "done")
            except Exception as e:  # noqa: BLE001 - recorded in the run dir, then re-raised
                if global_rank == 0:
                    set_state(d, "failed", error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc()[-4000:])
                failed.append(f"{d.name}: {type(e).__name__}: {e}")
        return failed


def foreign_or(fn: Callable, raw: dict) -> tuple[Callable, object]:
    """A run dir for another trainer (config.yaml names `trainer: {kind: trl|verl|command}`)
    runs through its adapter (ablate/adapters/runner.py); else `fn` trains the TrainConfig."""
    if is_foreign(raw):
        # Local: the adapters' runner reads curves with pandas (0.8 s), which `ablate status`
        # (it imports the executors) should not pay for.
        from ablate.adapters.runner import run_foreign

        return run_foreign, raw
    return fn, TrainConfig.model_validate(raw)


def hand_over(handler) -> None:
    """The trainer saved at a step boundary because of USR2: now let submitit's own handler
    do what it does on that signal (rank 0: pickle the job, `scontrol requeue`, exit; other
    ranks: log and return). Outside submitit (no callable handler) there is nothing to do."""
    if callable(handler):
        handler(signal.SIGUSR2, None)
