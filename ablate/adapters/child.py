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
from typing import IO


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> None:
    """Linux: the trainer gets SIGKILL when the job process dies (killed, OOM), so a killed
    job leaves no trainer behind even though the trainer is in a session of its own."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the job's own cleanup (finally) is all
        return
    if os.getppid() != parent:  # the job died before prctl took effect
        os._exit(1)


def _child_setup(parent: int) -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    _die_with_parent(parent)


def start(argv: list[str], out: IO[bytes], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """Start the trainer as the leader of a new session (its own process group)."""
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True,
                            preexec_fn=functools.partial(_child_setup, os.getpid()))


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
