"""Every trainer kind a study may name has one adapter in ADAPTERS, the built-in trainer's
included, and each has every part of the Adapter protocol with its signature (a missing or
differently called part fails here, not when a study first reaches it); the planning
capabilities are the built-in trainer's alone; a run dir's config finds its adapter."""

from __future__ import annotations

import inspect
from typing import get_args

from ablate.adapters import ADAPTERS, adapter_class, adapter_for, memory_plan, time_plan
from ablate.adapters.base import Adapter, TrainerSpec
from ablate.adapters.builtin import BuiltinAdapter
from ablate.adapters.foreign import ForeignAdapter
from trainer.config import TrainConfig

METHODS = ("from_spec", "load_base", "check_values", "point_runs", "run_id", "problems",
           "check_fit", "job_config", "run", "curve", "fit_defaults")
CAPABILITIES = ("memory_plan", "time_plan", "topology", "split_lines", "split_json", "gpu_reason",
                "replan", "time_range", "command")
STATIC = ("from_spec", "job_config", "run", "curve", "fit_defaults")


def test_every_kind_has_one_adapter_with_the_whole_protocol():
    kinds = set(get_args(TrainerSpec.model_fields["kind"].annotation))
    assert set(ADAPTERS) == kinds, (sorted(ADAPTERS), sorted(kinds))
    for kind, cls in ADAPTERS.items():
        assert cls.kind == kind and isinstance(cls.reads_own_log, bool), kind
        for name in METHODS:
            want, got = ([p for p in inspect.signature(getattr(c, name)).parameters
                          if p not in ("self", "cls")] for c in (Adapter, cls))
            assert got == want, f"{kind}.{name}{got}: the protocol says {want}"
        for name in STATIC:  # a job and the analysis call them on the class
            assert isinstance(inspect.getattr_static(cls, name), (staticmethod, classmethod)), \
                f"{kind}.{name} is not callable on the class"
        for name in CAPABILITIES:
            assert hasattr(cls, name), f"{kind}: no {name} (None when it has none)"


def test_planning_is_the_built_in_trainers_and_others_say_they_have_none():
    have = {k: [c for c in CAPABILITIES if getattr(cls, c) is not None]
            for k, cls in ADAPTERS.items()}
    assert have == {"ablate": ["memory_plan", "time_plan", "topology", "split_lines",
                               "split_json", "gpu_reason", "replan", "time_range"],
                    "trl": ["command"], "verl": ["command"], "command": ["command"]}, have
    assert ADAPTERS["ablate"].reads_own_log is False
    assert all(ADAPTERS[k].reads_own_log for k in ("trl", "verl", "command"))
    trl = TrainerSpec(kind="trl")
    from ablate.adapters.study import ForeignConfig

    cfg = ForeignConfig(trainer=trl, seed=0, overrides={"learning_rate": 0.1})
    assert memory_plan(cfg, None).note == \
        "trainer kind trl: no memory plan (ablate plans only its own trainer)"
    assert memory_plan(cfg, None).fits is None and time_plan(cfg, None, None) is None
    assert isinstance(adapter_for(trl), ForeignAdapter)
    assert isinstance(adapter_for(TrainerSpec()), BuiltinAdapter)


def test_a_run_dirs_config_finds_its_adapter():
    """What a job and the analysis read: a config.yaml without `trainer:` is the built-in
    trainer's (its TrainConfig checked before the run is marked running); one naming a kind
    is that trainer's, handed to its runner as written; a kind no adapter has goes the way of
    other trainers, whose runner refuses it."""
    raw = TrainConfig().model_dump(mode="json")
    assert adapter_class(raw) is BuiltinAdapter
    assert BuiltinAdapter.job_config(raw) == TrainConfig()
    foreign = {"trainer": {"kind": "command", "command": "x"}, "seed": 0, "overrides": {}}
    assert adapter_class(foreign) is ADAPTERS["command"]
    assert adapter_class(foreign).job_config(foreign) is foreign
    assert adapter_class({"trainer": {"kind": "nemo"}}) is ForeignAdapter
    assert adapter_class(None) is BuiltinAdapter  # a study with no runs yet
