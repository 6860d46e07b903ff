"""Preemption keeps work (issue 23 item 5): a stop signal (Slurm's USR2) makes the trainer
checkpoint the last finished step and stop (at the next boundary, or at once from inside
generation: issue 31, tests/test_async_eval.py); the next attempt resumes from that checkpoint;
`checkpoint.every_minutes` saves on the wall clock. Real trainer, real signals; the last test
runs a 2-rank job on the real Slurm test cluster (tests/slurm/cluster.sh) and preempts it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from _study_util import ROOT, cli_json, metric_steps, release_requeued, states, wait_until
from _trainer_util import config, tiny

import trainer
from trainer import rundir
from trainer.dist import preempt


def _cfg(steps: int, every_eval: int, **over):
    return config(tiny(budget={"steps": steps},
                       eval={"every_steps": every_eval, "per_decade": None},
                       checkpoint={"every_steps": 10_000, **over}))


def _signal_when(run_dir: Path, step: int) -> threading.Thread:
    """A thread that sends this process USR2 once status.json shows `step`; it stores the
    step it saw just before signalling in `.seen`."""
    def go():
        while (seen := rundir.read_status(run_dir).get("step") or 0) < step:
            time.sleep(0.005)
        t.seen = seen
        os.kill(os.getpid(), signal.SIGUSR2)

    t = threading.Thread(target=go, daemon=True)
    t.seen = None
    t.start()
    return t


@pytest.mark.slow
def test_signal_checkpoints_at_the_next_boundary_and_the_rerun_resumes_there(tmp_path, usr2):
    c, d = _cfg(steps=16, every_eval=8), tmp_path / "run"
    t = _signal_when(d, 3)
    trainer.run(c, d)
    t.join(5)
    r, s = preempt.stopped_at(), preempt.signal_step()
    # Saved at the last finished step (the step in flight abandoned inside its generation),
    # at the boundary that ends it, or the next one for a signal after that boundary's check:
    # at most that one step's work is redone.
    assert r is not None and t.seen <= r and s - 1 <= r <= s + 1, (t.seen, s, r, metric_steps(d))
    st = rundir.read_status(d)
    phase = preempt.signal_phase()  # where the signal landed: any phase of a step
    assert phase in ("generation", "update", "push", "boundary"), phase
    rec = [{"signal_in_step": s, "signal_in_phase": phase, "checkpoint_step": r}]
    assert st["state"] == "running" and st["step"] == r and st["preemptions"] == rec
    ck = rundir.checkpoint_dir(d)
    import torch

    assert torch.load(ck / "state.pt", weights_only=False)["step"] == r  # not step 0's
    assert metric_steps(d) == [0] + ([8] if r >= 8 else [])
    preempt.reset()  # the next attempt (a new process on a real cluster)
    trainer.run(c, d)
    st = rundir.read_status(d)
    assert st["state"] == "done" and st["resumed_from"] == r and st["preemptions"] == rec
    assert metric_steps(d) == [0, 8, 16]


@pytest.mark.slow
def test_every_minutes_saves_on_the_wall_clock(tmp_path):
    """A run whose step cadence never saves is killed (-9) mid-run: with every_minutes set,
    the checkpoint it leaves is recent; without it, only step 0's exists."""
    def killed_run(name: str, minutes: float | None) -> int:
        d = tmp_path / name
        d.mkdir()
        c = _cfg(steps=100_000, every_eval=100_000, every_minutes=minutes)
        (d / "in.yaml").write_text(yaml.safe_dump(c.model_dump(mode="json")))
        env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}")
        p = subprocess.Popen([sys.executable, "-m", "ablate", "run", str(d / "in.yaml"),
                              "--out", str(d / "out")], env=env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: (rundir.read_status(d / "out").get("step") or 0) >= 30, 240, 0.1,
                       "30 steps")
        finally:
            p.kill()
            p.wait()
        import torch

        return torch.load(rundir.checkpoint_dir(d / "out") / "state.pt", weights_only=False)["step"]

    assert killed_run("steps-only", None) == 0
    # Checkpoints every 60 ms of wall clock: with steps-only saving none, any saved step
    # comes from the clock rule, whatever the machine's speed (a proxy step takes > 10 ms).
    assert killed_run("clock", 0.001) > 0


# -- the real Slurm cluster ------------------------------------------------------------------

STUDY = """name: {name}
base: {base}
overrides:
  model.proxy: {{hidden_size: 64, num_layers: 2, num_heads: 2, intermediate_size: 128, warmup_target: null}}
  task: {{num_train_prompts: 64, num_eval_prompts: 16}}
  rollout: {{prompts_per_step: 8, generations_per_prompt: 4}}
  eval: {{every_steps: 40, num_prompts: 16, samples_per_prompt: 1, per_decade: null}}
  checkpoint.every_steps: 10000
  engine.threads: 1
axes:
  loss.type: [cispo]
seeds: [0]
budget: {{steps: {steps}}}
"""


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout


@pytest.mark.slurm
def test_two_rank_slurm_job_preempted_resumes_from_the_signal_checkpoint(tmp_path):
    """A 2-task gloo job whose periodic checkpoint never comes (every 10,000 steps; evals every
    40) gets Slurm's USR2 mid-run (`scancel --signal=USR2`: what preempt_send_user_signal and
    `--signal=USR2@delay` deliver to every task). Both ranks stop at the same boundary after a
    collective save, rank 0 hands over to submitit which requeues the same job, and the next
    attempt resumes from that step: nothing completed before the signal is redone and every
    eval step is in metrics.jsonl exactly once. Also the job as a data-parallel Slurm job:
    the profile's tasks and sbatch keys in the script, both tasks signalled, device-hours
    counting both processes and the work counted once (was test_slurm.py's 2-task test)."""
    if os.environ.get("ABLATE_TEST_SLURM") != "1" and not _sh("sinfo", "-h"):
        pytest.skip("no Slurm cluster: run `bash tests/slurm/cluster.sh start`")
    steps = 120
    study = tmp_path / "pre.yaml"
    study.write_text(STUDY.format(name="pre", base=ROOT / "recipes" / "proxy.yaml", steps=steps))
    prof = tmp_path / "two.yaml"
    prof.write_text("executor: slurm\nslurm:\n  tasks_per_node: 2\n  cpus_per_task: 1\n"
                    "  time_min: 30\n  sbatch: {comment: ablate-test}\n"
                    "  setup: ['export OMP_NUM_THREADS=1']\n")
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study
    from trainer.policy import proxy_path

    proxy_path(expand(load_study(study))[0].config)  # build the model once, before the ranks
    (rid,) = cli_json("sweep", str(study), "--profile", str(prof),
                      "--results", str(tmp_path / "res"))["submitted"]
    sdir = tmp_path / "res" / "pre"
    run_dir = sdir / rid
    job = states(sdir)[rid]["job_id"].split(":")[1]  # before: ablate status runs squeue/sacct
    seen = wait_until(lambda: (x := rundir.read_status(run_dir).get("step") or 0) >= 50 and x,
                      300, 0.02, "step 50 (past the step-40 eval)")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    signalled = time.time()

    def requeued() -> bool:  # Slurm holds a requeued job back a while: release it now
        release_requeued(job, signalled)
        return (rundir.read_status(run_dir).get("resumed_from") is not None
                or rundir.read_status(run_dir).get("state") == "done")

    wait_until(requeued, 180, 0.5, "the requeued job to resume")
    final = wait_until(lambda: (x := rundir.read_status(run_dir))["state"] in ("done", "failed") and x,
                       400, 1.0, "the resumed run to finish")
    assert final["state"] == "done" and final["step"] == steps, final
    ((s, r),) = [(p["signal_in_step"], p["checkpoint_step"]) for p in final["preemptions"]]
    # Resumed from the signal's checkpoint, not the last periodic one (step 40): no step that
    # had completed when the signal was sent is redone; the save came at the boundary ending
    # the step in flight on rank 0 (s), or the next one if it came after that boundary's check,
    # or (the stop honoured inside generation) the last finished one, s - 1.
    assert final["resumed_from"] == r and seen <= r and s - 1 <= r <= s + 1, (seen, final)
    after = states(sdir)[rid]
    assert after["job_id"] == f"slurm:{job}" and after["attempts"] == 1  # the same job, requeued
    assert "REQUEUE" in _sh("sacct", "-D", "-n", "-X", "-P", "-o", "State", "-j", job)
    logs = {t: "".join(p.read_text(errors="replace")
                       for p in (sdir / "_submitit").glob(f"{job}_{t}_log.*")) for t in (0, 1)}
    assert f"stop signal: checkpointed at step {r}" in logs[0], logs[0][-3000:]
    assert f"resumed from the checkpoint at step {r}" in logs[0], logs[0][-3000:]
    assert "Caught signal SIGUSR2" in logs[0]  # submitit's handler ran after the save
    # a preemption, not a timeout: submitit counts a signal within min(80%, limit - 10 min)
    # of time_min as preempted (submitit/core/job_environment.py has_timed_out; time_min 30)
    assert "this job is preempted" in logs[0]
    assert "Not checkpointing nor requeuing since I am a slave (procid=1)" in logs[1]
    assert metric_steps(run_dir) == [0, 40, 80, 120]  # each eval step once
    script = next((sdir / "_submitit").glob("*_submission.sh")).read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "#SBATCH --comment=ablate-test" in script
    # One data-parallel job: device-hours count both processes; work is counted once.
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["gpu_hours"] == pytest.approx(last["time/wall_s"] * 2 / 3600, rel=1e-6)
    assert last["samples"] == steps * 8 * 4  # prompts_per_step x generations_per_prompt
    assert (run_dir / "checkpoint" / "state.pt").exists()
    assert sorted(p.name for p in run_dir.glob("*metrics*")) == ["metrics.jsonl"]
    print(json.dumps({"status_step_before_signal": seen, "signal_in_step": s,
                      "checkpoint_step": r}))
