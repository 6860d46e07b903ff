"""Preemption: a signal asks the trainer to checkpoint at the next step boundary and stop.

Why a flag and not a save inside the handler: Slurm sends USR2 (`--signal=USR2@delay` before
the time limit, or on preemption with `preempt_send_user_signal`) at an arbitrary moment, in
the middle of a forward pass or of a collective. A checkpoint must be taken between optimizer
steps, and under DeepSpeed every rank must enter the save together. So the handler only
records the signal; at each step boundary the loop agrees on the flag across ranks (one
all-reduce: a rank that got the signal a little later still stops at the same step), saves,
and returns. Whoever launched the trainer then requeues the job (ablate/studies/launch/job.py
hands over to submitit's own USR2 handler, which pickles the job and runs `scontrol requeue`).

Nothing here imports ablate or submitit: the trainer only sets and reads flags.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable

_requested = False  # a stop signal arrived (this process)
_current: int | None = None  # the step this process is working towards (the loop sets it)
_signal_step: int | None = None  # _current when the first stop signal arrived
_stopped_at: int | None = None  # the step the trainer checkpointed at and stopped (this attempt)


def request(signum: int | None = None, frame=None) -> None:
    """The signal handler: record the request, nothing else (no I/O: a print here could
    re-enter a stderr write the signal interrupted). The loop logs it at the boundary."""
    global _requested, _signal_step
    if not _requested:
        _signal_step = _current
    _requested = True


def install(signum: int = signal.SIGUSR2) -> Callable | int | None:
    """Make `signum` set the flag; returns the handler it replaces (to hand over to later).
    Only the main thread may set handlers: elsewhere nothing changes and None is returned."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, request)


def at_step(step: int) -> None:
    """The loop is now working on optimizer step `step` (the signal's step is noted from it)."""
    global _current
    _current = step


def signal_step() -> int | None:
    """The step in flight when the first stop signal arrived (None: none arrived)."""
    return _signal_step


def requested() -> bool:
    """True once a stop signal arrived in this process."""
    return _requested


def mark_stopped(step: int) -> None:
    """The trainer saved a checkpoint at `step` and returned because of the request."""
    global _stopped_at
    _stopped_at = step


def stopped_at() -> int | None:
    """The step the last run stopped at for preemption (None: it was not stopped)."""
    return _stopped_at


def reset() -> None:
    """Forget a request and a stop (a new process attempt, or tests)."""
    global _requested, _stopped_at, _signal_step, _current
    _requested, _stopped_at, _signal_step, _current = False, None, None, None
