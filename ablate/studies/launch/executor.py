"""The one interface every executor implements (a module, registered in launch.EXECUTORS).

Why a Protocol: `ablate sweep` submits and `ablate status` asks about jobs without knowing
where they run; a typed contract says what a new executor (a cloud batch service, another
scheduler) must provide, and a type checker or tests/test_executors.py says when one does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


@runtime_checkable
class Executor(Protocol):
    """Where jobs run. Job ids it returns start with its registered name and a colon."""

    UNAVAILABLE: str  # the one-line reason `available()` is False, naming what to use instead

    def available(self) -> bool:
        """Whether this machine can submit to it (checked before anything is written)."""
        ...

    def submit(self, run_dirs: list[Path], folder: Path, profile: Profile, *, entry: str,
               job_name: str) -> dict[str, str]:
        """Start jobs training `run_dirs` (scripts and logs under `folder`), as `profile`
        says; returns run_id (the run dir's name) -> job id. InputError when the scheduler
        refuses the profile (nothing may be left running then)."""
        ...

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """The scheduler's STATE of each job id (launch.ALIVE for ones still coming; anything
        else for ended ones: the run dir's files decide how it ended)."""
        ...
