"""Real Slurm: arrays split by MaxArraySize, failures, cancellation, reruns (preemption and
requeue: tests/test_preempt.py, tests/test_rehearsal.py).

Needs a real cluster with accounting (`bash tests/slurm/cluster.sh start`, MaxArraySize=5);
jobs run the real trainer on a tiny CPU proxy.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from _stage_entry import truth_A
from _study_util import cli, cli_json, states, tiny_study, wait_until
from ablate.studies.launch import slurm

pytestmark = pytest.mark.slurm


def _slurm_reason() -> str | None:
    if os.environ.get("ABLATE_TEST_SLURM") == "1" or slurm.available():
        return None
    return "no Slurm cluster: run `bash tests/slurm/cluster.sh start` (or set ABLATE_TEST_SLURM=1)"


@pytest.fixture(scope="module", autouse=True)
def _need_slurm():
    reason = _slurm_reason()
    if reason:
        print(f"SKIP slurm tests: {reason}")
        pytest.skip(reason)


def _settled(study_dir: Path):
    s = states(study_dir)
    return s if all(x["state"] not in ("queued", "running") for x in s.values()) else None


def _sweep(study: Path, results: Path) -> dict:
    return cli_json("sweep", str(study), "--executor", "slurm", "--results", str(results))


def _check_compare(sdir: Path, variants: set[str]) -> None:
    """`ablate compare --json` on the Slurm-run study: one object per variant, each a fit with a
    finite A inside a finite 95% interval (and a finite B interval), or no fit with a verdict
    and the error that says why. These 4-step runs of an untrained proxy (warmup_target null: pass rate 0) have 3
    evaluation points, under the 5 a fit needs, so here every variant must say so; a variant
    that claimed a fit from them, or vanished from the output, fails."""
    r = cli("compare", str(sdir), "--json")
    # 3: "not yet" (docs/JSON.md): well-formed runs whose curves cannot be fit yet
    assert r.returncode in (0, 3) and "Traceback" not in r.stderr, r.stderr[-2000:]
    groups = json.loads(r.stdout)["rows"]  # --json prints its object on either exit code
    assert sorted(g["variant"] for g in groups) == sorted(variants)
    for g in groups:
        if g.get("A") is not None:
            lo, hi = g["A_ci"]
            assert all(map(math.isfinite, (g["A"], lo, hi, *g["B_ci"]))) and lo <= g["A"] <= hi, g
        else:
            assert g["error"] and g["verdict"], g  # e.g. verdict "too short", error names why
    fitted = [g for g in groups if g.get("A") is not None]
    assert (r.returncode == 0) == bool(fitted), (r.returncode, groups)
    assert not fitted, groups
    assert all(re.search(r"\d+ (?:\w+ )?points?\b", g["error"]) for g in groups), groups
    assert r.stderr.startswith("not yet: no variant could be fit yet"), r.stderr


def test_array_split_by_max_array_size_then_rerun_submits_nothing(tmp_path):
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "arr", "  loss.type: [cispo, ppo]", seeds="[0, 1]", steps=4)
    out = _sweep(study, results)
    assert out["executor"] == "slurm" and len(out["submitted"]) == 4
    sdir = results / "arr"
    subs = json.loads((sdir / "submissions.json").read_text())
    jobs = [subs[r]["jobs"][-1] for r in out["submitted"]]
    limit = slurm.max_array_size()
    assert all(j.startswith("slurm:") and "_" in j for j in jobs)  # all array tasks
    assert limit < 4, "tests/slurm/cluster.sh sets MaxArraySize=3 so that 4 runs need 2 arrays"
    arrays = {j.split(":")[1].split("_")[0] for j in jobs}
    assert len(arrays) == -(-4 // limit), (limit, jobs)  # ceil(6 / MaxArraySize) arrays
    assert all(int(j.split("_")[1]) < limit for j in jobs)
    # srun is told each task's cores itself (submitit's srun line has no --cpus-per-task, and
    # Slurm 22.05-23.02's srun does not take it from sbatch): the line sbatch runs says so
    scripts = [p.read_text() for p in tmp_path.rglob("*_submission.sh")]
    sruns = [x for t in scripts for x in t.splitlines() if x.startswith("srun ")]
    assert sruns and all("--cpus-per-task=1 " in x for x in sruns), sruns
    assert all("export SRUN_CPUS_PER_TASK=1" in t for t in scripts), scripts[:1]
    print("srun line:", sruns[0])
    final = wait_until(lambda: _settled(sdir), 240, 1.0, "array to finish")
    assert all(s["state"] == "done" and s["step"] == 4 for s in final.values()), final
    # Gathered into the frame the curve engine reads; compare runs on the study dir.
    from ablate.analysis.gather import gather

    frame = gather(sdir)
    assert (sdir / "metrics.parquet").exists()
    assert set(frame["run_id"]) == set(out["submitted"])
    _check_compare(sdir, {s["name"] for s in final.values()})
    again = _sweep(study, results)
    assert again["submitted"] == [] and len(again["skipped"]) == 4


def test_slurm_study_is_fitted_and_ranked_by_compare(tmp_path):
    """The Slurm path down to the fits: sbatch arrays -> job entry -> metrics.jsonl -> gather ->
    compare. The job entry is the known-curve stand-in (tests/_stage_entry.py: true A = lr x
    2000), so what compare must say is known without trusting the fitter: every variant fits,
    A within 0.03 of its truth and inside its own interval, and the higher-A variant ranks first."""
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "fitted", "  optim.lr: [1.5e-4, 3.0e-4]\n", seeds="[0, 1]",
                       steps=60)
    out = cli_json("sweep", str(study), "--executor", "slurm", "--results", str(results),
                   "--entry", "_stage_entry:synthetic_run")
    assert len(out["submitted"]) == 4
    sdir = results / "fitted"
    final = wait_until(lambda: _settled(sdir), 240, 1.0, "known-curve jobs to finish")
    assert all(s["state"] == "done" for s in final.values()), final
    groups = cli_json("compare", str(sdir))["rows"]
    assert [g["variant"] for g in groups] == ["optim.lr=0.0003", "optim.lr=0.00015"], groups
    for g, lr in zip(groups, (3.0e-4, 1.5e-4)):
        lo, hi = g["A_ci"]
        assert lo <= g["A"] <= hi and abs(g["A"] - truth_A(lr)) < 0.03, (lr, g)
    assert groups[1]["A_ci"][1] < groups[0]["A_ci"][0], groups  # 0.30 vs 0.60: separated


def test_failing_run_resubmitted_up_to_bound_then_failed(tmp_path):
    results = tmp_path / "results"
    study = tiny_study(tmp_path, "fail", "  loss.type: [cispo]", steps=4, extra="max_attempts: 2\n",
                       overrides="  model.name_or_path: /nonexistent/model\n")
    sdir = results / "fail"
    for attempt in (1, 2):
        assert len(_sweep(study, results)["submitted"]) == 1
        (s,) = wait_until(lambda: _settled(sdir), 120, 1.0, "failed job").values()
        assert s["state"] == "failed" and s["attempts"] == attempt, s
    sacct = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", s["job_id"].split(":")[1]],
                           capture_output=True, text=True).stdout
    assert "FAILED" in sacct
    out = _sweep(study, results)
    assert out["submitted"] == []
    (s,) = states(sdir).values()
    assert s["state"] == "failed" and "nonexistent" in s["error"]


def _long_study(tmp_path: Path, name: str, steps: int) -> Path:
    # Evaluate/checkpoint every 20 steps so a run lasts long enough to be interrupted.
    return tiny_study(tmp_path, name, "  loss.type: [cispo]", steps=steps, every=20)


def test_cancelled_run_is_shown_and_resubmitted(tmp_path):
    results = tmp_path / "results"
    study = _long_study(tmp_path, "cancel", steps=100000)
    sdir = results / "cancel"
    (rid,) = _sweep(study, results)["submitted"]
    wait_until(lambda: states(sdir)[rid]["state"] == "running", 120, 1.0, "job to run")
    job = states(sdir)[rid]["job_id"].split(":")[1]
    subprocess.run(["scancel", job], check=True)
    s = wait_until(lambda: (x := states(sdir)[rid])["state"] == "cancelled" and x, 120, 1.0, "cancel")
    assert s["attempts"] == 1
    again = _sweep(study, results)
    assert again["submitted"] == [rid]
    s = states(sdir)[rid]
    assert s["attempts"] == 2 and s["state"] in ("queued", "running") and s["job_id"] != f"slurm:{job}"
    subprocess.run(["scancel", s["job_id"].split(":")[1]], check=True)


def test_profile_rejected_by_sbatch_is_a_one_line_input_error(tmp_path):
    study = tiny_study(tmp_path, "badpart", "  loss.type: [cispo]", steps=2)
    prof = tmp_path / "p.yaml"
    prof.write_text("executor: slurm\nslurm:\n  partition: nosuchpartition\n")
    r = cli("sweep", str(study), "--profile", str(prof), "--results", str(tmp_path / "res"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "partition" in r.stderr.lower()
    assert not (tmp_path / "res").exists(), "a refused submission must leave nothing written"
