"""Stops honoured in every phase of a step (issue 40 point 4): a stop signal (Slurm's USR2)
that lands inside the update is seen before the next micro-batch, the step is dropped and the
last finished step checkpointed, exactly: the resumed run's metrics equal an uninterrupted
run's. Real trainer, real signals, the hf backend on CPU; the test wraps the update's forward
only to pick the moment (the update itself runs). The push's stop needs a vLLM engine
(tests/test_vllm_stop.py); several ranks: tests/test_stop_ranks.py.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
from _trainer_util import close, config, metrics, status, tiny

import trainer
from trainer import rundir
from trainer.dist import preempt
from trainer.loop.update import PolicyUpdate

KEYS = ["step", "samples", "tokens", "flops", "eval/pass_rate", "train/reward", "train/loss",
        "train/micro_batches"]
# Eval (and save) at 0 and 4 only: the step before the stopped one (2) was never saved at a
# boundary, so the stop's own save must write it, with what the abandoned step drew put back.
BASE = {"budget": {"steps": 4}, "eval": {"every_steps": 4},
        "checkpoint": {"every_steps": 10_000}, "engine": {"micro_batch_tokens": 64}}
PPO = {**BASE, "off_policy": {"mode": "ppo_off_policy", "k": 2}}  # step 3 draws a new batch
PIPELINE = {**BASE, "off_policy": {"mode": "pipeline", "k": 1}}  # data-timed (hf default)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Each mode's uninterrupted run, made once."""
    runs: dict[str, list[dict]] = {}

    def get(name: str, over: dict) -> list[dict]:
        if name not in runs:
            d = tmp_path_factory.mktemp(f"straight-{name}") / "run"
            trainer.run(config(tiny(**over)), d)
            runs[name] = metrics(d)
        return runs[name]

    return get


def _rows(rows: list[dict]) -> list[list]:
    return [[r.get(k) for k in KEYS] for r in rows]


def _signal_in_update(monkeypatch, step: int, micro_batch: int) -> list[int]:
    """USR2 to this process right after micro-batch `micro_batch`'s forward of step `step`'s
    update; returns the list of that step's forwards (micro-batch indices) that ran."""
    real, ran = PolicyUpdate.forward, []

    def forward(self, ro, b):
        if preempt._current == step:
            ran.append(len(ran))
            if ran[-1] == micro_batch:
                os.kill(os.getpid(), signal.SIGUSR2)
        return real(self, ro, b)

    monkeypatch.setattr(PolicyUpdate, "forward", forward)
    return ran


def _stopped_then_resumed(tmp_path, monkeypatch, over: dict) -> tuple[list[int], dict, list]:
    """Run with a stop inside step 3's update (after micro-batch 0), then resume; returns
    (the forwards step 3 ran, the stopped attempt's status, the metrics after the resume)."""
    ran = _signal_in_update(monkeypatch, step=3, micro_batch=0)
    d = tmp_path / "run"
    trainer.run(config(tiny(**over)), d)
    st = status(d)
    ck = torch.load(rundir.checkpoint_dir(d) / "state.pt", weights_only=False)
    assert ck["step"] == 2 == preempt.stopped_at(), (ck["step"], preempt.stopped_at(), st)
    monkeypatch.undo()
    preempt.reset()  # the next attempt (a new process on a real cluster)
    trainer.run(config(tiny(**over)), d)
    assert status(d)["state"] == "done", status(d)
    return ran, st, metrics(d)


@pytest.mark.slow
def test_stop_inside_the_update_drops_the_step_and_resume_is_exact(tmp_path, monkeypatch,
                                                                    usr2, straight):
    """ppo_off_policy k=2: step 3 generates a big batch and trains on its first half; the
    stop after its first micro-batch drops the step; the checkpoint is step 2's, with step
    3's generation, counters and pool records put back, so the resume redoes step 3 exactly."""
    ran, st, rows = _stopped_then_resumed(tmp_path, monkeypatch, PPO)
    assert ran == [0], ran  # seen before micro-batch 1: no second forward
    assert st["state"] == "running" and st["step"] == 2, st
    assert st["preemptions"] == [{"signal_in_step": 3, "signal_in_phase": "update",
                                  "checkpoint_step": 2}], st
    ref = straight("ppo", PPO)
    assert ref[-1]["train/micro_batches"] > 1, ref[-1]  # the stop had micro-batches to skip
    assert _rows(rows) == [[close(v) for v in r] for r in _rows(ref)]


@pytest.mark.slow
def test_pipeline_stop_inside_the_update_resumes_exactly(tmp_path, monkeypatch, usr2,
                                                         straight):
    """PipelineRL-k, data-timed: the groups step 3 took from the stream are back in the
    checkpointed stream, so the resumed run trains on them at step 3, as the straight run."""
    ran, st, rows = _stopped_then_resumed(tmp_path, monkeypatch, PIPELINE)
    assert ran == [0], ran
    assert st["preemptions"][0]["signal_in_phase"] == "update", st
    assert _rows(rows) == [[close(v) for v in r] for r in _rows(straight("pipeline", PIPELINE))]
