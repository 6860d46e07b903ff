"""Multi-process jobs: 2 ranks (gloo on CPU) sharing ONE run dir, through `trainer.loop.train.run`.

Each case launches real processes of tests/_multirank_script.py with the environment `srun`
gives its tasks, so trainer/dist/groups.py's Slurm path builds the process group. Checks what
a multi-rank job must guarantee: one writer (exactly one metrics line per eval step, no
duplicates, status done, config written), a checkpoint every rank resumes from in a fresh job,
identical weights on every rank, and data parallelism that is the same math as one process
(step 1's loss and grad norm match a single-process run on the same batch).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy

SCRIPT = ROOT / "tests" / "_multirank_script.py"


def launch(engine: str, stage: int, steps: int, prompts: int, work: Path, cache: Path,
           world: int = 2) -> list[dict]:
    launch_ranks(SCRIPT, [engine, str(stage), str(steps), str(prompts), str(work)], cache, world,
                 timeout=240)
    return [json.loads((work / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def cache() -> Path:
    """Warm the proxy once; every launch loads it from here."""
    path = session_cache()
    warm_proxy(path, "__import__('_multirank_script').config('torch', 0, 1, 5)")
    return path


@pytest.fixture(scope="module")
def single(cache, tmp_path_factory):
    """The same job in one process (torch engine, one step): the reference for the math."""
    def run(prompts: int) -> list[dict]:
        work = tmp_path_factory.mktemp(f"mr-single{prompts}")
        launch("torch", 0, 1, prompts, work, cache, world=1)
        return _metrics(work / "run")
    return run


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _max_abs_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def check_shared_run_dir(run: Path, steps: int) -> list[dict]:
    """One writer: one metrics file, one line per eval step, status done, one checkpoint."""
    rows = _metrics(run)
    assert [r["step"] for r in rows] == list(range(steps + 1))  # no duplicate, none missing
    assert sorted(p.name for p in run.glob("*metrics*")) == ["metrics.jsonl"]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "done" and status["step"] == steps
    assert (run / "config.yaml").exists()
    assert (run / "checkpoint" / "state.pt").exists()
    assert not list(run.glob("checkpoint.tmp-*")) and not (run / "checkpoint.old").exists()
    return rows


def check_job(engine: str, stage: int, prompts: int, cache: Path, work: Path,
              single: list[dict]) -> None:
    r0, r1 = launch(engine, stage, 2, prompts, work, cache)
    assert r0["world"] == r1["world"] == 2 and r0["step"] == r1["step"] == 2
    assert _max_abs_diff(r0["params"], r1["params"]) == 0.0  # ranks hold the same model
    first = check_shared_run_dir(work / "run", 2)
    # Data parallel = the same math: the ranks' weighted shard losses add up to the
    # single-process loss of the whole batch, and the averaged gradient has its norm.
    ref = single[1]
    assert first[1]["train/loss"] == pytest.approx(ref["train/loss"], rel=1e-4, abs=1e-6)
    assert first[1]["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-4)
    assert first[1]["train/reward"] == ref["train/reward"]  # rank 0's batch = the 1-process one
    # Work counted once per job (shards summed, a zero-weighted step not counted; ZeRO-3's
    # empty local shards not mistaken for the model size).
    for key in ("tokens", "flops/training", "flops/generation"):
        assert first[1][key] == pytest.approx(ref[key], rel=1e-9), key
    # A fresh job with a larger budget resumes from the shared checkpoint.
    r0, r1 = launch(engine, stage, 3, prompts, work, cache)
    assert r0["step"] == r1["step"] == 3
    assert _max_abs_diff(r0["params"], r1["params"]) == 0.0
    rows = check_shared_run_dir(work / "run", 3)
    assert rows[:3] == first  # lines before the checkpoint untouched by the resumed job
    assert rows[3]["samples"] > rows[2]["samples"]


@pytest.mark.slow
def test_torch_engine_two_ranks_one_run_dir_rank1_empty(cache, single, tmp_path):
    """One prompt group per step: rank 1 only ever takes zero-weighted steps."""
    check_job("torch", 0, 1, cache, tmp_path, single(1))


@pytest.mark.deepspeed
def test_deepspeed_zero3_two_ranks_one_run_dir(cache, single, tmp_path):
    pytest.importorskip("deepspeed", reason="deepspeed cannot be imported")
    check_job("deepspeed", 3, 5, cache, tmp_path, single(5))
