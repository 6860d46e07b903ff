"""Real Ray: a local cluster (`ray start --head`, 2 CPUs, everything on 127.0.0.1) runs small
studies of the CPU proxy through the Ray executor (ablate/studies/launch/ray.py): two 1-rank
runs at once, then `ablate status` and `ablate compare` on them and a re-run that submits
nothing; a 2-rank gloo run (torchrun in one Ray job) stopped with Ray's own `stop_job`,
resumed by the next sweep from its checkpoint, with every eval step exactly once.

Skips with the reason printed where ray is not importable; under CI=true it fails instead
(tests/run.sh installs the `ray` extra, as it does the other stages).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from _study_util import ROOT, cli, cli_json, metric_steps, states, tiny_study, wait_until

pytestmark = pytest.mark.ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    """The `ray` script of this Python (the one the job client is), else the one on PATH."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


@pytest.fixture(scope="module")
def cluster():
    """A head node on 127.0.0.1 only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray from
    resolving 127.0.0.1 to the machine's address, which would open its GCS, raylet and client
    ports to the network); the job API's address. `ray stop` at the end (it stops every Ray
    process of this user on the machine: run these tests where no other Ray runs)."""
    try:
        import ray.job_submission  # noqa: F401
    except ImportError as e:
        reason = f"ray is not importable ({e}); pip install -e '.[ray]' -c tests/constraints.txt"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        print(f"SKIP ray tests: {reason}")
        pytest.skip(reason)
    temp = tempfile.mkdtemp(prefix="ablray")  # short: Ray's socket paths must fit 107 bytes
    gcs, dash = _free_port(), _free_port()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}")  # the jobs import this tree
    start = [_ray_cli(), "start", "--head", "--node-ip-address=127.0.0.1",
             "--dashboard-host=127.0.0.1", f"--port={gcs}", f"--dashboard-port={dash}",
             "--num-cpus=2", "--include-dashboard=true", "--disable-usage-stats",
             f"--temp-dir={temp}"]
    r = subprocess.run(start, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        subprocess.run([_ray_cli(), "stop", "--force"], capture_output=True, timeout=120)
        pytest.fail(f"ray start failed: {r.stderr[-2000:]}")
    try:
        yield f"http://127.0.0.1:{dash}"
    finally:
        subprocess.run([_ray_cli(), "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def _profile(tmp_path: Path, address: str, **ray: object) -> Path:
    lines = "".join(f"  {k}: {v}\n" for k, v in {"address": address, **ray}.items())
    path = tmp_path / f"ray_{len(list(tmp_path.glob('ray_*')))}.yaml"
    path.write_text(f"executor: ray\nray:\n{lines}")
    return path


def _settled(sdir: Path, rid: str, ends=("done", "failed", "cancelled", "interrupted")):
    x = states(sdir)[rid]
    return x if x["state"] in ends else None


def test_two_one_rank_runs_then_status_compare_and_a_rerun_that_submits_nothing(
        tmp_path, cluster):
    study = tiny_study(tmp_path, "one", "  loss.type: [cispo, ppo]", steps=4)
    prof = _profile(tmp_path, cluster, runs_at_once=2)
    results = tmp_path / "results"
    dry = cli("sweep", str(study), "--profile", str(prof), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert f"executor ray (the profile's executor): a Ray job per run on the cluster at " \
           f"{cluster}, one process" in " ".join(dry.stdout.split()), dry.stdout
    out = cli_json("sweep", str(study), "--profile", str(prof), "--results", str(results))
    assert out["executor"] == "ray" and len(out["submitted"]) == 2
    sdir = results / "one"
    jobs = {rid: states(sdir)[rid]["job_id"] for rid in out["submitted"]}
    assert all(j.startswith("ray:") and j.endswith(f"@{cluster}") for j in jobs.values())
    assert len(set(jobs.values())) == 2
    for rid in out["submitted"]:
        final = wait_until(lambda: _settled(sdir, rid), 240, 1.0, f"run {rid} to end")
        assert final["state"] == "done" and final["step"] == 4, final
    from ablate.studies import launch

    # Ray's SUCCEEDED, in the shared words (launch.ALIVE's vocabulary), once the job's process
    # has ended (the run dir says done a moment before)
    wait_until(lambda: set(launch.job_states(list(jobs.values())).values()) == {"COMPLETED"},
               60, 0.5, "the jobs to read COMPLETED")
    status = cli_json("status", str(sdir))
    assert sorted(r["state"] for r in status) == ["done", "done"], status
    # compare on 4-step runs: 3 evaluation points, under the 5 a fit needs: "not yet" (3)
    r = cli("compare", str(sdir), "--json")
    assert r.returncode in (0, 3) and "Traceback" not in r.stderr, r.stderr[-2000:]
    rows = json.loads(r.stdout)["rows"]
    assert sorted(g["variant"] for g in rows) == ["loss.type=cispo", "loss.type=ppo"], rows
    again = cli_json("sweep", str(study), "--profile", str(prof), "--results", str(results))
    assert again["submitted"] == [] and sorted(again["skipped"]) == sorted(out["submitted"])
    # a cluster that does not answer: the run dir's files decide (UNKNOWN, never an error)
    gone = "ray:s@http://127.0.0.1:1"
    assert launch.job_states([gone]) == {gone: "UNKNOWN"}


def test_two_rank_run_stopped_by_ray_resumes_with_every_step_once(tmp_path, cluster):
    """torchrun starts two gloo ranks in one Ray job (RANK, WORLD_SIZE, MASTER_ADDR...); a
    re-run while it is queued or running submits nothing;
    `stop_job` sends SIGTERM to all of them, the trainer checkpoints its last finished step
    and the run reads "stopped"; the next sweep submits it under a new id, it resumes from the
    checkpoint and finishes with every eval step exactly once; a third sweep submits 0."""
    from ray.job_submission import JobSubmissionClient

    steps, every = 400, 20
    study = tiny_study(tmp_path, "two", "  loss.type: [cispo]", steps=steps, every=every)
    prof = _profile(tmp_path, cluster, ranks_per_node=2, stop_wait_s=60)
    results = tmp_path / "results"
    (rid,) = cli_json("sweep", str(study), "--profile", str(prof),
                      "--results", str(results))["submitted"]
    sdir, run_dir = results / "two", results / "two" / rid
    # queued or running: a re-run submits nothing
    assert states(sdir)[rid]["state"] in ("queued", "running")
    assert cli_json("sweep", str(study), "--profile", str(prof),
                    "--results", str(results))["submitted"] == []
    wait_until(lambda: (run_dir / "checkpoint").is_dir() and (states(sdir)[rid]["step"] or 0)
               >= 2 * every, 240, 0.2, "a checkpoint past step 40")
    first = states(sdir)[rid]["job_id"]
    sid = first.split(":", 1)[1].split("@")[0]
    client = JobSubmissionClient(cluster)
    assert client.stop_job(sid)
    stopped = wait_until(lambda: _settled(sdir, rid, ("stopped", "done", "failed")), 120, 0.5,
                         "the stopped run")
    assert stopped["state"] == "stopped" and 0 < stopped["step"] < steps, stopped
    wait_until(lambda: str(client.get_job_status(sid).value) == "STOPPED", 60, 0.5, "STOPPED")
    # The Ctrl-C advice and `status` name Ray's own stop command for a live job
    from ablate.studies import launch

    assert launch.stop_command([first]) == f"ray job stop --address {cluster} {sid}"
    again = cli_json("sweep", str(study), "--profile", str(prof), "--results", str(results))
    assert again["submitted"] == [rid]
    second = states(sdir)[rid]["job_id"]
    assert second != first  # a new submission id: Ray refuses one it has seen
    final = wait_until(lambda: _settled(sdir, rid), 300, 1.0, "the resumed run to finish")
    assert final["state"] == "done" and final["step"] == steps, final
    got = metric_steps(run_dir)
    assert got == sorted(set(got)) == list(range(0, steps + 1, every)), got
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["samples"] == steps * 4 * 2  # prompts x generations, counted once
    assert last["gpu_hours"] == pytest.approx(last["time/wall_s"] * 2 / 3600, rel=1e-6)  # 2 ranks
    status = json.loads((run_dir / "status.json").read_text())
    assert [p["signal"] for p in status["preemptions"]] == ["SIGTERM"], status
    assert cli_json("sweep", str(study), "--profile", str(prof),
                    "--results", str(results))["submitted"] == []
