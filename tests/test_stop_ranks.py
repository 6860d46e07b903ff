"""A stop that reaches one rank of a 2-rank job inside the update (issue 40 point 4): every rank
stops before the same micro-batch (none is left in a collective its peer left), the step is
dropped, the last finished step checkpointed, and the resumed job's metrics equal the
uninterrupted job's. Real processes (tests/_stop_rank_script.py, gloo on CPU, Slurm-style
variables), real signals; the torch engine, and DeepSpeed ZeRO-2 and ZeRO-3 (marker
`deepspeed`: their partitioned gradients accumulate across micro-batches, and the checkpoint
is a collective).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy
from _trainer_util import close

SCRIPT = ROOT / "tests" / "_stop_rank_script.py"
KEYS = ["step", "samples", "tokens", "flops", "eval/pass_rate", "train/reward", "train/loss",
        "train/grad_norm", "train/micro_batches"]


def _deepspeed_or_skip() -> None:
    try:
        from trainer.engine_deepspeed import import_deepspeed

        import_deepspeed()
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot test here
        print(f"SKIP deepspeed: cannot import deepspeed ({type(e).__name__}: {e})",
              file=sys.stderr)
        pytest.skip(f"deepspeed cannot be imported: {e}")


@pytest.fixture(scope="module")
def cache() -> Path:
    """Warm the proxy once; every launch loads it from here."""
    path = session_cache()
    warm_proxy(path, "__import__('_stop_rank_script').config('torch', 0)")
    return path


def _rows(run: Path) -> list[list]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [[r.get(k) for k in KEYS] for r in rows]


@pytest.mark.parametrize("engine, stage", [
    pytest.param("torch", 0, marks=pytest.mark.slow),
    pytest.param("deepspeed", 2, marks=pytest.mark.deepspeed),
    pytest.param("deepspeed", 3, marks=pytest.mark.deepspeed)])
def test_a_stop_on_one_rank_inside_the_update_stops_every_rank_at_the_same_micro_batch(
        engine, stage, cache, tmp_path):
    if engine == "deepspeed":
        _deepspeed_or_skip()
    launch_ranks(SCRIPT, [engine, str(stage), str(tmp_path)], cache, timeout=600)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    # Rank 1 got the signal after its first forward; both left before the second one.
    assert r0["ran"] == r1["ran"] == [0], (r0, r1)
    assert r1["signal_name"] == "SIGUSR2" and r0["signal_name"] is None, (r0, r1)
    for r in (r0, r1):  # rank 0 learnt of it in the agreement, in the same step and phase
        assert (r["stopped_at"], r["signal_step"], r["signal_phase"]) == (2, 3, "update"), r
        assert r["resumed_stopped_at"] is None, r
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "done" and status["resumed_from"] == 2, status
    assert status["preemptions"] == [{"signal_in_step": 3, "signal_in_phase": "update",
                                      "checkpoint_step": 2}], status
    straight = _rows(tmp_path / "straight")
    assert [r[0] for r in straight] == [0, 4] and straight[-1][-1] > 1, straight
    assert _rows(tmp_path / "run") == [[close(v) for v in r] for r in straight]
