"""Launching locally with the real trainer on a tiny proxy: submit, status, resume semantics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from _study_util import cli_json, metric_steps, states, tiny_study, wait_until
from ablate.studies import launch
from ablate.errors import InputError
from ablate.studies.launch.profile import Profile
from ablate.studies.status import derive_state
from ablate.studydir import study_dir_for
from ablate.cli.live import watch as wait


def _settled(study_dir: Path):
    s = states(study_dir)
    return s if all(x["state"] not in ("queued", "running") for x in s.values()) else None


@pytest.mark.slow
def test_local_sweep_runs_trainer_and_rerun_submits_only_new(tmp_path):
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "loc", "  loss.aggregation: [prompt, token]", steps=4)
    out = cli_json("sweep", str(study), "--executor", "local", "--results", str(results))
    assert out["executor"] == "local" and len(out["submitted"]) == 2 and out["skipped"] == []
    sdir = results / "loc"
    variants = json.loads((sdir / "variants.json").read_text())
    assert {v["run_id"] for v in variants} == set(out["submitted"])
    assert (sdir / "study.yaml").read_text() == study.read_text()
    final = wait(sdir, poll_s=0.5, timeout_s=240, show=False)
    assert [s.state for s in final] == ["done", "done"], [s.to_json() for s in final]
    for v in variants:
        d = sdir / v["run_id"]
        assert (d / "config.yaml").exists() and (d / "checkpoint").is_dir()
        assert metric_steps(d) == [0, 2, 4]
    # A rerun of a finished study submits nothing ...
    again = cli_json("sweep", str(study), "--executor", "local", "--results", str(results))
    assert again["submitted"] == [] and sorted(again["skipped"]) == sorted(out["submitted"])
    # ... and adding a value to the axis submits exactly the new run.
    study.write_text(study.read_text().replace("[prompt, token]", "[prompt, token, sample]"))
    more = cli_json("sweep", str(study), "--executor", "local", "--results", str(results))
    assert len(more["submitted"]) == 1 and more["submitted"][0] not in out["submitted"]
    wait(sdir, poll_s=0.5, timeout_s=240, show=False)
    st = states(sdir)
    assert len(st) == 3 and all(s["state"] == "done" for s in st.values())
    assert st[more["submitted"][0]]["name"] == "loss.aggregation=sample"


@pytest.mark.slow
def test_failing_run_is_resubmitted_up_to_the_bound(tmp_path):
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "bad", "  loss.type: [cispo]", steps=4,
                       overrides="  model.name_or_path: /nonexistent/model\n", extra="max_attempts: 2\n")
    sdir = results / "bad"
    seen_attempts = []
    for _ in range(2):
        out = cli_json("sweep", str(study), "--executor", "local", "--results", str(results))
        assert len(out["submitted"]) == 1
        (s,) = wait_until(lambda: _settled(sdir), 120, 0.5, "failed run").values()
        assert s["state"] == "failed" and "nonexistent" in (s["error"] or "")
        seen_attempts.append(s["attempts"])
    assert seen_attempts == [1, 2]
    out = cli_json("sweep", str(study), "--executor", "local", "--results", str(results))
    assert out["submitted"] == [] and len(out["skipped"]) == 1
    (s,) = states(sdir).values()
    assert s["state"] == "failed" and s["attempts"] == 2


@pytest.mark.slow
def test_debug_executor_runs_in_process(tmp_path):
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "dbg", "  loss.type: [ppo]", steps=2)
    out = cli_json("sweep", str(study), "--executor", "debug", "--results", str(results), "--wait")
    (rid,) = out["submitted"]
    st = states(results / "dbg")[rid]
    assert st["state"] == "done" and st["step"] == 2 and st["job_id"].startswith("debug:")


def test_local_is_default_without_working_slurm(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("sinfo", "sbatch"):  # present but failing, like a node without a controller
        (fake / tool).write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact' >&2\nexit 1\n")
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert launch.choose_executor(None, Profile()) == "local"
    with pytest.raises(InputError, match="no working Slurm"):
        launch.choose_executor("slurm", Profile())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert launch.choose_executor(None, Profile()) == "local"
    assert launch.choose_executor(None, Profile(executor="debug")) == "debug"


def test_runs_bound_for_slurm_are_sized_and_timed_on_slurms_shape(tmp_path, monkeypatch):
    """No --executor and a Slurm that answers: the runs go to Slurm, so the memory plan, the
    split and the time plan all use the Slurm job shape (2 nodes here), not the local one of
    a single process (they used to: shape from the named executor, limits from the chosen)."""
    from _cli import ablate

    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("sinfo", "sbatch"):  # a Slurm that answers (sinfo exits 0)
        (fake / tool).write_text("#!/bin/sh\nexit 0\n")
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    prof = tmp_path / "two_nodes.yaml"
    prof.write_text("slurm:\n  nodes: 2\n  time_min: 30\n")
    study = tiny_study(tmp_path, "shape", "  loss.type: [ppo]", steps=4)
    r = ablate("sweep", str(study), "--profile", str(prof), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    res = row["resources"]
    assert row["launch"]["executor"] == "slurm", row["launch"]
    assert res["training_ranks"] == 2 and res["time"]["devices"] == 2, res


def test_study_dir_cannot_escape_results(tmp_path):
    assert study_dir_for(tmp_path, "ok") == (tmp_path / "ok").resolve()
    for bad in ("../x", "a/b", "/etc"):
        with pytest.raises(InputError):
            study_dir_for(tmp_path, bad)


@pytest.mark.parametrize("status,fresh,job,sched,expected", [
    ({"state": "done"}, True, "slurm:1", "RUNNING", "done"),
    ({"state": "diverged"}, True, None, None, "diverged"),
    ({}, True, None, None, "pending"),
    ({}, True, "slurm:1_0", "PENDING", "queued"),
    ({}, True, "slurm:1_0", "RUNNING", "running"),
    ({"state": "failed"}, True, "slurm:1_0", "PENDING", "queued"),  # requeued after preemption
    ({"state": "failed"}, True, "slurm:1_0", "FAILED", "failed"),
    ({"state": "running"}, True, "slurm:1_0", "CANCELLED", "cancelled"),
    ({}, True, "slurm:1_0", "CANCELLED", "cancelled"),
    ({"state": "running"}, True, "slurm:1_0", "TIMEOUT", "failed"),
    ({"state": "running"}, True, "slurm:1_0", "UNKNOWN", "interrupted"),  # no sacct: not fatal
    ({"state": "failed"}, False, "local:5", "RUNNING", "queued"),  # old failure, resubmitted
    ({"state": "failed"}, True, "local:5", "RUNNING", "failed"),  # share job runs the others
    ({}, True, "local:5", "GONE", "interrupted"),
])
def test_state_derivation(status, fresh, job, sched, expected):
    sub = {"attempts": 1, "jobs": [job]} if job else None
    assert derive_state(status, fresh, sub, sched) == expected


def test_ctrl_c_line_says_how_to_stop_slurm_jobs():
    """`sweep --wait`'s Ctrl-C line: Slurm array tasks by their ids (the `slurm:` prefix is
    ablate's, not scancel's); ids of jobs that are gone give no command."""
    from ablate.cli.waiting import stop_command

    assert stop_command(["slurm:123_1", "slurm:123_0", "slurm:77"]) == "scancel 123_0 123_1 77"
    assert stop_command(["local:999999999"]) == ""  # no such process: nothing to kill
    assert stop_command([]) == ""
