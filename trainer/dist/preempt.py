"""Preemption: a signal asks the trainer to checkpoint the last finished step and stop.

Why a flag and not a save inside the handler: Slurm sends USR2 (`--signal=USR2@delay` before
the time limit, or on preemption with `preempt_send_user_signal`) at an arbitrary moment, in
the middle of a forward pass or of a collective. A checkpoint must be taken between optimizer
steps, and under DeepSpeed every rank must enter the save together. So the handler only
records the signal; at each step boundary the loop agrees on the flag across ranks (one
all-reduce: a rank that got the signal a little later still stops at the same step), saves,
and returns. A step can take longer than the signal's warning (the paper's: 15-20 min of
generation against Slurm's `signal_delay_s` of 5 min), so the stop is also honoured inside
generation and eval: the generators call `check()` between decode steps and raise `Stopped`;
the loop then abandons the step in flight and checkpoints the last finished one
(trainer/loop/train.py). The update (minutes of micro-batches at scale) and the weight push
check it too, at points every rank reaches alike: `agreed()` all-reduces the flag before each
micro-batch (trainer/loop/update.py) and, under ZeRO-3, before each parameter's gather
(trainer/generation/push.py PushStop), so no rank waits in a collective its peer left.
The launcher still requeues if even that does not finish in time
(ablate/studies/launch/job.py `Fallback`). Whoever launched the trainer then requeues the job (ablate/studies/launch/job.py
hands over to submitit's own USR2 handler, which pickles the job and runs `scontrol requeue`).

The same flag answers SIGINT and SIGTERM where a launcher asks for it (ablate's local executor:
`kill -INT PID`, as `ablate sweep`'s Ctrl-C message says, or a plain `kill`): the run checkpoints
and stops instead of dying mid-step, and `signal_name()` tells the launcher it was a stop, not a
preemption. A second SIGINT raises KeyboardInterrupt at once (a stop that must not wait).

Nothing here imports ablate or submitit: the trainer only sets and reads flags.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

_requested = False  # a stop signal arrived (this process)
_current: int | None = None  # the step this process is working towards (the loop sets it)
_signal_step: int | None = None  # _current when the first stop signal arrived
_stopped_at: int | None = None  # the step the trainer checkpointed at and stopped (this attempt)
_signal_time: float | None = None  # time.monotonic() when the first stop signal arrived
_signum: int | None = None  # the first stop signal's number
_phase: str | None = None  # the part of the step this process is in (the loop sets it)
_signal_phase: str | None = None  # _phase when the first stop signal arrived


class Stopped(Exception):
    """Raised inside generation or eval once a stop signal arrived: the work in flight is
    abandoned (the loop checkpoints the last finished step; an eval in flight is redone on
    resume, trainer/loop/eval_point.py)."""


STOP = "ablate-stop"  # what rank 0 broadcasts instead of a batch when it abandons a step


def request(signum: int | None = None, frame=None) -> None:
    """The signal handler: record the request, nothing else (no I/O: a print here could
    re-enter a stderr write the signal interrupted). The loop logs it at the boundary."""
    global _requested, _signal_step, _signal_time, _signum
    if _requested and signum == signal.SIGINT and _signum == signal.SIGINT:
        raise KeyboardInterrupt  # Ctrl-C twice: stop now, from the last checkpoint there is
    if not _requested:
        _signal_step = _current
        _signal_time = time.monotonic()
        _signum = signum
        _note_phase()
    _requested = True


def _note_phase() -> None:
    global _signal_phase
    _signal_phase = _phase


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


def at_phase(phase: str) -> None:
    """The loop entered `phase` of its step ("generation", "update", "push", "boundary"): the
    preemption record says where a stop landed (status.json `signal_in_phase`)."""
    global _phase
    _phase = phase


def signal_phase() -> str | None:
    """The phase in flight when the first stop signal arrived (None: none arrived)."""
    return _signal_phase


def signal_step() -> int | None:
    """The step in flight when the first stop signal arrived (None: none arrived)."""
    return _signal_step


def requested() -> bool:
    """True once a stop signal arrived in this process."""
    return _requested


def check() -> None:
    """Raise `Stopped` if a stop signal arrived: called by generation and eval between decode
    steps (never inside a collective: a ZeRO-3 lockstep decode checks only between calls)."""
    if _requested:
        raise Stopped("stop signal")


def agreed(device) -> bool:
    """Whether a stop signal reached any rank: one MAX all-reduce of the flag (this process's
    flag alone in a single process). Every rank must call it at the same point (the same
    micro-batch, the same parameter) and gets the same answer there, so all leave together.
    A rank the signal has not reached takes the stop as its own (peer_stopped)."""
    from trainer.dist.groups import all_reduce_floats  # torch: only where ranks agree

    stop = all_reduce_floats([float(_requested)], device, "max")[0] > 0
    if stop:
        peer_stopped()
    return stop


def peer_stopped() -> None:
    """A stop that reached another rank, learnt in an all-reduce: noted here as if the signal
    had arrived now (its step and phase in flight; check() raises from now on, so this rank's
    generation and eval end too), without a signal of its own (signal_name stays None)."""
    global _requested, _signal_step, _signal_time
    if not _requested:
        _signal_step, _signal_time = _current, time.monotonic()
        _note_phase()
        _requested = True


def signal_name() -> str | None:
    """"SIGINT", "SIGTERM", "SIGUSR2"... of the first stop signal (None: none arrived)."""
    return None if _signum is None else signal.Signals(_signum).name


def signal_age() -> float | None:
    """Seconds since the first stop signal arrived (None: none arrived)."""
    return None if _signal_time is None else time.monotonic() - _signal_time


def mark_stopped(step: int) -> None:
    """The trainer saved a checkpoint at `step` and returned because of the request."""
    global _stopped_at
    _stopped_at = step


def stopped_at() -> int | None:
    """The step the last run stopped at for preemption (None: it was not stopped)."""
    return _stopped_at


def reset() -> None:
    """Forget a request and a stop (a new process attempt, or tests)."""
    global _requested, _stopped_at, _signal_step, _current, _signal_time, _signum
    global _phase, _signal_phase
    _requested, _stopped_at, _signal_step, _current, _signal_time = False, None, None, None, None
    _signum, _phase, _signal_phase = None, None, None
