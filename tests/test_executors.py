"""Every registered executor implements the one Executor protocol, with the same signatures
(a module missing a function, or taking other arguments, fails here, not at submit time), and
the default is one rule over what is available (launch.pick)."""

from __future__ import annotations

import inspect

from ablate.studies import launch
from ablate.studies.launch import EXECUTORS
from ablate.studies.launch.executor import Capacity, Executor
from ablate.studies.launch.profile import Profile
from ablate.validation import Strict
from trainer.plan.time_plan import Limits
from trainer.validate import JobShape

FUNCTIONS = ("available", "job_shape", "limits", "capacity", "describe", "sentence", "submit",
             "job_states", "stop_command")


def test_every_executor_implements_the_protocol():
    assert {"local", "slurm", "debug"} <= set(EXECUTORS)
    prof = Profile()
    for name, mod in EXECUTORS.items():
        assert isinstance(mod, Executor), f"{name}: missing part of the Executor protocol"
        assert isinstance(mod.UNAVAILABLE, str) and mod.UNAVAILABLE, name
        assert issubclass(mod.Section, Strict) and name in Profile.model_fields, name
        for fn in FUNCTIONS:
            want = inspect.signature(getattr(Executor, fn)).parameters
            got = inspect.signature(getattr(mod, fn)).parameters
            assert list(got) == [p for p in want if p != "self"], f"{name}.{fn}: {list(got)}"
            for p, param in got.items():
                assert param.kind == want[p].kind, f"{name}.{fn}({p}): {param.kind}"
        assert isinstance(mod.job_shape(prof), JobShape) and isinstance(mod.limits(prof), Limits)
        cap = mod.capacity(prof) if name != "slurm" else None  # slurm's may ask sinfo
        if cap is not None:
            assert isinstance(cap, Capacity) and cap.executor == name and cap.text()
            info = mod.describe(prof, cap)
            assert info["runs_at_once"] == cap.runs_at_once
            assert mod.sentence(info)
        assert mod.stop_command([]) == ""


def test_local_and_debug_are_always_available():
    assert EXECUTORS["local"].available() and EXECUTORS["debug"].available()


def test_the_default_is_one_rule_over_availability(monkeypatch):
    """No executor named: the available one of lowest DEFAULT_PREFERENCE (here local, no
    Slurm on PATH); an executor without a preference is never picked by default."""
    monkeypatch.setenv("PATH", "/nonexistent")
    name, why = launch.pick(None, Profile())
    assert name == "local" and why == EXECUTORS["local"].CHOSEN_BECAUSE
    never = [n for n, m in EXECUTORS.items() if m.DEFAULT_PREFERENCE is None]
    assert "debug" in never and name not in never
    assert launch.pick("debug", Profile()) == ("debug", "--executor")
