"""Every registered executor implements the one Executor protocol, with the same signatures
(a module missing a function, or taking other arguments, fails here, not at submit time), and
the default is one rule over what is available (launch.pick). An optional capability
(executor.GpuNodes) is had whole or not at all, and Slurm's answers in its own keys."""

from __future__ import annotations

import inspect

from ablate.studies import launch
from ablate.studies.launch import EXECUTORS
from ablate.studies.launch.executor import Capacity, Executor, GpuNodes
from ablate.studies.launch.profile import Profile, find_profile, load_profile
from ablate.validation import Strict
from trainer.plan.time_plan import Limits
from trainer.validate import JobShape

FUNCTIONS = ("available", "job_shape", "limits", "capacity", "describe", "sentence", "submit",
             "job_states", "stop_command")


# The GpuNodes capability's own members (what it adds to Executor), read from the protocol.
GPU_NODES = sorted({*GpuNodes.__annotations__, *(k for k, v in vars(GpuNodes).items()
                                                 if callable(v) and not k.startswith("_"))})


def same_signature(name: str, mod, proto: type, fn: str) -> None:
    want = inspect.signature(getattr(proto, fn)).parameters
    got = inspect.signature(getattr(mod, fn)).parameters
    assert list(got) == [p for p in want if p != "self"], f"{name}.{fn}: {list(got)}"
    for p, param in got.items():
        assert param.kind == want[p].kind, f"{name}.{fn}({p}): {param.kind}"


def test_every_executor_implements_the_protocol():
    assert {"local", "slurm", "debug"} <= set(EXECUTORS)
    prof = Profile()
    for name, mod in EXECUTORS.items():
        assert isinstance(mod, Executor), f"{name}: missing part of the Executor protocol"
        assert isinstance(mod.UNAVAILABLE, str) and mod.UNAVAILABLE, name
        assert issubclass(mod.Section, Strict) and name in Profile.model_fields, name
        for fn in FUNCTIONS:
            same_signature(name, mod, Executor, fn)
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


def test_a_capability_is_had_whole_or_not_at_all():
    """launch.gpu_nodes skips an executor missing one part of GpuNodes, so a half-done one
    would silently lose `sweep --within` and the GPU-need check: each has all of it, with the
    protocol's signatures, or none; Slurm has it, local not."""
    assert {"CALLED", "GPU_PROFILE", "key", "cpu_cores", "proposal_profile"} <= set(GPU_NODES)
    for name, mod in EXECUTORS.items():
        has = [m for m in GPU_NODES if hasattr(mod, m)]
        assert has in ([], GPU_NODES), f"{name}: part of GpuNodes only: {has}"
        if has:
            assert isinstance(mod, GpuNodes) and launch.gpu_nodes(name) is mod, name
            for fn in GPU_NODES:
                if callable(getattr(GpuNodes, fn, None)):
                    same_signature(name, mod, GpuNodes, fn)
    assert launch.gpu_nodes("slurm") is EXECUTORS["slurm"] is launch.gpu_nodes()
    assert launch.gpu_nodes("local") is None and launch.gpu_nodes("nope") is None


def test_slurm_sizes_gpu_nodes_in_its_own_keys():
    """What `sweep --within` and the GPU-need check ask (ablate/studies/sizing.py,
    proposal.py, gpu_need.py), answered from the `slurm:` section; no `sinfo` asked
    (study_nodes is set)."""
    sizer = launch.gpu_nodes("slurm")
    prof = Profile.model_validate({"slurm": {"nodes": 2, "tasks_per_node": 4, "cpus_per_task": 3,
                                             "study_nodes": 5, "array_parallelism": 2}})
    assert sizer.key("study_nodes") == "slurm.study_nodes" and sizer.CALLED == "Slurm"
    assert sizer.nodes_per_run(prof) == 2 and sizer.cpu_cores(prof) == 2 * 4 * 3
    auto = prof.model_copy(update={"slurm": prof.slurm.model_copy(
        update={"tasks_per_node": "auto"})})
    assert sizer.cpu_cores(auto) == 2 * 1 * 3  # auto: one task on a node without GPUs
    more = sizer.with_study_nodes(prof, 9)
    assert (sizer.study_nodes(more).nodes, sizer.study_nodes(prof).nodes) == (9, 5)
    assert sizer.nodes_capacity(more, nodes_per_run=3, array_cap=None).runs_at_once == 3
    assert sizer.nodes_capacity(more).runs_at_once == 2  # 4 fit, array_parallelism caps
    data = {"executor": "slurm", "slurm": {"partition": "gpu", "nodes": 2}, "gpu_model": "h100"}
    out = sizer.proposal_profile(data, 3, 0)
    assert out["slurm"] == {"partition": "gpu", "nodes": 3, "array_parallelism": 1}
    assert list(out) == list(data) and data["slurm"]["nodes"] == 2  # the file's order; a copy
    Profile.model_validate(out)
    assert sizer.keeps_proposal(prof, 2, 2)
    assert not sizer.keeps_proposal(prof, 3, 1) and not sizer.keeps_proposal(prof, 2, 3)
    shipped = load_profile(find_profile(sizer.GPU_PROFILE))  # the profile its advice names
    assert sizer.job_shape(shipped).gpus_per_node > 0
