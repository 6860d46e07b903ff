"""`ablate sweep --wait`: a live per-run view (state, step / budget) on stderr, and where to
look as soon as a run fails."""

from __future__ import annotations

import pytest

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ablate.cli.live import watch
from ablate.studydir import where_to_look
from ablate.studies.status import study_states

ROOT = Path(__file__).resolve().parents[1]


def test_watch_names_the_files_of_a_failed_run(tmp_path):
    from rich.console import Console

    d = tmp_path / "st"
    (d / "_submitit").mkdir(parents=True)
    variants = [{"run_id": "aaaaaaaaaaaa", "name": "loss.type=cispo", "seed": 0,
                 "config": {"budget": {"steps": 8}}},
                {"run_id": "bbbbbbbbbbbb", "name": "loss.type=ppo", "seed": 0,
                 "config": {"budget": {"steps": 8}}}]
    (d / "variants.json").write_text(json.dumps(variants))
    for v, st in zip(variants, ({"state": "done", "step": 8},
                                {"state": "failed", "step": 3, "error": "RuntimeError: boom"})):
        (d / v["run_id"]).mkdir()
        (d / v["run_id"] / "status.json").write_text(json.dumps(st))
    (d / "submissions.json").write_text(json.dumps({
        v["run_id"]: {"attempts": 1, "jobs": ["local:4242"], "submitted_at": 0}
        for v in variants}))
    (d / "_submitit" / "4242_0_log.err").write_text("Traceback ...")
    buf = io.StringIO()
    final = watch(d, poll_s=0.1, timeout_s=5, console=Console(file=buf, width=200))
    assert [s.state for s in final] == ["done", "failed"]
    out = buf.getvalue()
    assert "failed loss.type=ppo seed 0 (run bbbbbbbbbbbb) at step 3: RuntimeError: boom" in out
    assert f"look at: {d / 'bbbbbbbbbbbb' / 'status.json'}, {d / '_submitit' / '4242_0_log.err'}" \
        in out
    assert "8/8" in out and "3/8" in out  # step / budget per run
    (s,) = [s for s in study_states(d) if s.state == "failed"]
    assert where_to_look(d, s)[1].endswith("4242_0_log.err")


def test_watch_shows_the_share_of_a_flops_budget_the_trainer_reports(tmp_path):
    """A FLOPs budget has no step total: the bar follows the trainer's own budget share."""
    from rich.console import Console

    d = tmp_path / "st"
    d.mkdir()
    v = {"run_id": "cccccccccccc", "name": "base", "seed": 0, "config": {"budget": {"flops": 1e12}}}
    (d / "variants.json").write_text(json.dumps([v]))
    (d / v["run_id"]).mkdir()
    (d / v["run_id"] / "status.json").write_text(
        json.dumps({"state": "running", "step": 3, "progress": 0.25, "pid": os.getpid(),
                    "updated": 1e12}))
    buf = io.StringIO()
    (s,) = watch(d, poll_s=0.1, timeout_s=0.3, console=Console(file=buf, width=200))
    assert s.progress == 0.25
    assert "3 (25%)" in buf.getvalue()


@pytest.mark.slow
def test_sweep_wait_shows_runs_and_the_failure(tmp_path):
    study = tmp_path / "pv.yaml"
    study.write_text(f"name: pv\nbase: {ROOT / 'recipes' / 'proxy.yaml'}\naxes:\n"
                     "  loss.type: [cispo, ppo]\nseeds: [0]\nbudget: {steps: 4}\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}", COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "ablate", "sweep", str(study), "--executor",
                        "local", "--results", str(tmp_path / "results"), "--wait",
                        "--entry", "_progress_entry:run"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 1, r.stderr[-3000:]  # a run failed: not a success for a script
    assert "1 of 2 runs failed; first: loss.type=ppo seed 0: RuntimeError: boom" in r.stdout
    err = r.stderr
    assert "failed loss.type=ppo seed 0" in err and "boom at step 3" in err, err
    assert "look at:" in err and "status.json" in err and "_submitit" in err
    # the final view: the axis named once, each row its value
    assert "loss.type: cispo | ppo" in err and re.search(r"\ncispo +0 +done .* 4/4 ", err), err
    states = {s.name: s.state for s in study_states(tmp_path / "results" / "pv")}
    assert states == {"loss.type=cispo": "done", "loss.type=ppo": "failed"}
