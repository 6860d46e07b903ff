"""Every registered executor implements the one Executor protocol, with the same signatures
(a module missing a function, or taking other arguments, fails here, not at submit time)."""

from __future__ import annotations

import inspect

from ablate.studies.launch import EXECUTORS
from ablate.studies.launch.executor import Executor


def test_every_executor_implements_the_protocol():
    assert set(EXECUTORS) == {"local", "slurm", "debug"}
    for name, mod in EXECUTORS.items():
        assert isinstance(mod, Executor), f"{name}: missing part of the Executor protocol"
        assert isinstance(mod.UNAVAILABLE, str) and mod.UNAVAILABLE, name
        for fn in ("available", "submit", "job_states"):
            want = inspect.signature(getattr(Executor, fn)).parameters
            got = inspect.signature(getattr(mod, fn)).parameters
            assert list(got) == [p for p in want if p != "self"], f"{name}.{fn}: {list(got)}"
            for p, param in got.items():
                assert param.kind == want[p].kind, f"{name}.{fn}({p}): {param.kind}"


def test_local_and_debug_are_always_available():
    assert EXECUTORS["local"].available() and EXECUTORS["debug"].available()
