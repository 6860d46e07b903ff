"""The other trainer's process: started in a process group of its own, stopped by its signal.

Why a process group: trainers spawn workers (data loaders, Ray, vLLM engines); a stop must
reach all of them, and a kill must leave none behind.

Why USR2 is ignored in the child: on preemption Slurm sends USR2 to every process of the job
step, and USR2's default action kills. The job process owns that signal (it sets ablate's
preemption flag, ablate/studies/launch/job.py); the runner then sends the trainer its own
stop signal (`trainer.stop_signal`, SIGTERM by default), which the trainer can save on. A
trainer that installs its own USR2 handler still gets Slurm's signal: an ignored disposition
lasts only until a program sets a handler.

Why the trainer dies with the job: in a session of its own, a kill of the job's process group
(a local job killed, an OOM) would not reach it; PR_SET_PDEATHSIG makes the kernel kill it
when the job process dies.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Callable


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: between fork and exec the child must not load
    libraries or import (another thread of the job may hold a lock it would wait on)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the job's own cleanup (finally) is all
        return None


def _child_setup(parent: int, prctl: Callable[..., int] | None) -> None:
    """Between fork and exec: Slurm's USR2 ignored; on Linux, SIGKILL when the job process
    dies (killed, OOM), so a killed job leaves no trainer behind although the trainer is in
    a session of its own."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the job died before prctl took effect
            os._exit(1)


def start(argv: list[str], out: IO[bytes], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """Start the trainer as the leader of a new session (its own process group)."""
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True,
                            preexec_fn=functools.partial(_child_setup, os.getpid(), _prctl()))


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Send `signum` to the trainer's whole process group (gone already: nothing to do)."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def stop(proc: subprocess.Popen, stop_signal: str, grace_s: float) -> int:
    """Ask the trainer to stop with its stop signal; kill the group after `grace_s`. Returns
    its exit status (negative: the signal that ended it)."""
    if proc.poll() is None:
        signal_group(proc, signal.Signals[stop_signal])
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
    signal_group(proc, signal.SIGKILL)  # workers the leader left behind
    return proc.returncode
