"""trainer/generation/offpolicy.py `_in_turns`: a ppo_off_policy big generation runs in a
thread while the ranks agree every POLL_S, so no rank waits hours inside one collective (the
group's timeout would end it). One process here (the all-reduce is the identity): what comes
back, and that a stop or a failure inside the generation surfaces as the loop expects. The
2-rank run over two emulated nodes: tests/test_two_nodes.py."""

from __future__ import annotations

import pytest
import torch

from trainer.dist import preempt
from trainer.generation.offpolicy import _in_turns


def test_the_share_comes_back_and_a_rank_without_one_gets_none(monkeypatch):
    monkeypatch.setattr("trainer.generation.offpolicy.POLL_S", 0.01)
    assert _in_turns(lambda: "share", torch.device("cpu")) == "share"
    assert _in_turns(None, torch.device("cpu")) is None


def test_a_stop_inside_is_stopped_and_a_failure_is_its_own_error():
    def stopped():
        raise RuntimeError("decode cut") from preempt.Stopped("signal")

    try:
        with pytest.raises(preempt.Stopped, match="inside the big generation"):
            _in_turns(stopped, torch.device("cpu"))
        assert preempt.requested()  # the stop is this rank's too from now on
    finally:
        preempt.reset()

    def broken():
        raise ValueError("engine died")

    with pytest.raises(ValueError, match="engine died"):
        _in_turns(broken, torch.device("cpu"))
