"""Helpers for the study/launch tests: write study files, run the CLI, tiny proxy configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _cli import ablate

ROOT = Path(__file__).resolve().parents[1]

# A really tiny CPU proxy (1-layer 32-wide char Llama): a run of a few steps takes ~2 s, so
# launch tests exercise the real trainer, its checkpoints and its status files.
TINY_OVERRIDES = """  model.proxy: {{hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, warmup_target: null}}
  task: {{num_train_prompts: 64, num_eval_prompts: 16}}
  rollout: {{prompts_per_step: 4, generations_per_prompt: 2}}
  eval: {{every_steps: {every}, num_prompts: 16, samples_per_prompt: 1, per_decade: null}}
  checkpoint.every_steps: {every}
  engine.threads: 1
"""


def tiny_study(folder: Path, name: str, axes: str, *, seeds: str = "[0]", steps: int = 4,
               extra: str = "", overrides: str = "", every: int = 2) -> Path:
    """Write a study over recipes/proxy.yaml with the tiny overrides; returns its path."""
    text = (f"name: {name}\nbase: {ROOT / 'recipes' / 'proxy.yaml'}\noverrides:\n"
            f"{TINY_OVERRIDES.format(every=every)}{overrides}axes:\n{axes}\nseeds: {seeds}\nbudget: {{steps: {steps}}}\n{extra}")
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def cli(*args: str, timeout: float = 300, tests_on_path: bool = True):
    """`ablate ARGS` from the repository root, in this process (tests/_cli.py: the real entry
    point, exit codes included); jobs it starts get this tree and tests/ (the stand-in
    entries) on PYTHONPATH. `tests_on_path=False`: `python -m ablate` in a subprocess with only
    the repo on PYTHONPATH (tests/ holds a `vllm` folder that TRL would take for an installed
    vLLM, and this process has tests/ on sys.path); `timeout` applies to that one."""
    if tests_on_path:
        return ablate(*args, cwd=ROOT, env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ablate", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


def cli_json(*args: str, timeout: float = 300):
    r = cli(*args, "--json", timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def states(study_dir: Path) -> dict[str, dict]:
    """`ablate status` in-process (polling through a subprocess would steal the jobs' CPU)."""
    from ablate.studies.status import study_states

    return {s.run_id: s.to_json() for s in study_states(study_dir)}


#: Deadlines are for hangs, not for speed: each is stretched by this factor (a loaded 2-core
#: CI machine runs jobs several times slower than a quiet one; the passing path never waits
#: longer for it). ABLATE_TEST_PATIENCE overrides it.
PATIENCE = float(os.environ.get("ABLATE_TEST_PATIENCE", "3"))


def wait_until(pred, timeout: float, poll: float = 1.0, what: str = "condition"):
    """Poll `pred` until it returns something true (returned); AssertionError after
    `timeout` x PATIENCE seconds."""
    t0, limit = time.time(), timeout * PATIENCE
    while time.time() - t0 < limit:
        out = pred()
        if out:
            return out
        time.sleep(poll)
    raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")


def metric_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["step"] for x in lines if x.strip()]


_PENDING_SINCE: dict[str, float] = {}  # job id -> first time release_requeued saw it pending


def release_requeued(job: str, signalled_at: float) -> None:
    """Slurm holds a requeued job back a while (BeginTime): start it now, but not within 3 s
    of its previous attempt's end. slurmd refuses a job started within the second its previous
    attempt was killed in (slurmctld.log: "Killing non-startable batch JobId=65: Job credential
    revoked": the revocation and the new credential carry one-second timestamps); the job then
    ends failed without running, and a CI run once lost a test to it. The attempt ends (and the
    job turns PENDING) only after the trainer checkpoints, seconds after the signal on a loaded
    machine, so the 3 s count from when the job is first seen pending, not from the signal."""
    if time.time() - signalled_at < 3.0:
        return
    q = subprocess.run(["squeue", "-h", "-o", "%T", "-j", job], capture_output=True, text=True)
    if "PENDING" not in q.stdout:
        return
    first = _PENDING_SINCE.setdefault(job, time.time())
    if time.time() - first >= 3.0:
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)
