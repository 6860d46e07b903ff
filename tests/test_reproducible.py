"""A seed reproduces its run: every off-policy mode on the CPU proxy writes the same
metrics.jsonl (apart from the time columns) run to run, under a different load on the machine,
and after a kill -9 and resume (trainer/generation/pipeline_data.py for the pipeline's data timing).

Each test runs real `ablate run` processes: two copies side by side plus a CPU burner (so the
two see different, shifting load), then a third that is killed with SIGKILL mid-run and
resumed. The pipeline's free-running `rollout.async_timing: wall` is not expected to replay
(its docs say why); tests/test_pipeline_stream.py covers its k bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from _trainer_util import REPO, config, tiny
from trainer import rundir

# Columns measured in seconds (gpu_hours is train-loop wall x devices): the only ones that
# may differ between two runs of one config and seed.
TIME_COLUMNS = rundir.TIME_COLUMNS
STEPS = 12
MODES = {
    # k=2 over 12 steps: the lag ramps 0, 1, 2 then stays at k; groups_per_call 3 does not
    # divide prompts_per_step 8, so calls straddle steps (their weights: the later step's).
    "pipeline": {"off_policy": {"mode": "pipeline", "k": 2, "groups_per_call": 3},
                 "rollout": {"async_timing": "data"}},
    # k=3: checkpoints every 4 steps land inside a big generation (its minibatches are saved)
    "ppo_off_policy": {"off_policy": {"mode": "ppo_off_policy", "k": 3}},
}


@pytest.fixture(scope="module")
def warm_proxy():
    """Build (or load from the session's cache) the warmed proxy before any subprocess starts,
    so the runs only load it."""
    from trainer.policy import load_model

    load_model(config(tiny()))


def _write(tmp_path: Path, mode: str) -> Path:
    cfg = tiny(budget={"steps": STEPS}, eval={"every_steps": 3, "num_prompts": 16},
               checkpoint={"every_steps": 4}, **MODES[mode])
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cmd(path: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "ablate", "run", str(path), "--out", str(out), "--json"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in rows]


def _burner() -> subprocess.Popen:
    """A busy process competing for the cores (the load shifts as the OS schedules it)."""
    return subprocess.Popen([sys.executable, "-c", "while True: sum(i * i for i in range(10**5))"])


def _status_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("step", 0)
    except (OSError, ValueError):
        return 0


def _kill_then_resume(path: Path, d: Path, at_step: int) -> int:
    """Start a run, SIGKILL it once it has reported `at_step`, resume it to the end; the step
    it was killed at."""
    p = subprocess.Popen(_cmd(path, d), env=_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and p.poll() is None and _status_step(d) < at_step:
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed = _status_step(d)
    out = subprocess.run(_cmd(path, d), env=_env(), cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return killed


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_same_seed_same_metrics_under_load_and_after_kill_9(tmp_path, warm_proxy, mode):
    path = _write(tmp_path, mode)
    a, b = tmp_path / "a", tmp_path / "b"
    burner = _burner()
    try:
        runs = [subprocess.Popen(_cmd(path, d), env=_env(), cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for d in (a, b)]
        for p in runs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
    finally:
        burner.kill()
        burner.wait()
    ra, rb = _rows(a), _rows(b)
    assert [r["step"] for r in ra] == list(range(0, STEPS + 1, 3))
    assert ra == rb  # every column but the time ones, to the last bit
    if mode == "pipeline":
        assert [r["pipeline/lag_max"] for r in ra[1:]] == [2, 2, 2, 2]  # k bounds it, reached
    # kill -9 after the checkpoint of step 4, mid-window (evals at 3, 6, ...): the resume
    # redoes steps 5.. from the checkpoint and must land on the same rows
    c = tmp_path / "c"
    killed = _kill_then_resume(path, c, at_step=5)
    assert 4 <= killed < STEPS, killed
    assert _rows(c) == ra
