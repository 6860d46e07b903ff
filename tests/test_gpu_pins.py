"""The `[gpu]` extra pins what the release is tested with (issue 40): deepspeed at the release CI
runs on CPU (tests/constraints.txt), vLLM at SUPPORTED_VLLM and only where it installs (Python
>= 3.11, its PyPI metadata); where the marker leaves vLLM out, the trainer says so in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from trainer.generation.vllm_args import SUPPORTED_VLLM, check_vllm_version, installed_vllm

ROOT = Path(__file__).resolve().parents[1]


def gpu_extra() -> dict[str, Requirement]:
    # (a regex, not tomllib: the project supports Python 3.10)
    text = re.search(r"^gpu = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    reqs = [Requirement(s) for s in re.findall(r'"([^"]+)"', text)]
    return {r.name: r for r in reqs}


def test_gpu_extra_pins_deepspeed_to_the_release_ci_runs():
    ci = re.search(r"^deepspeed==([0-9.]+)$", (ROOT / "tests" / "constraints.txt").read_text(),
                   re.M).group(1)
    assert str(gpu_extra()["deepspeed"].specifier) == f"=={ci}", gpu_extra()


def test_vllm_only_where_it_installs():
    vllm = gpu_extra()["vllm"]
    assert str(vllm.specifier) == f"=={SUPPORTED_VLLM}"
    assert vllm.marker is not None
    assert not vllm.marker.evaluate({"python_version": "3.10"})
    assert vllm.marker.evaluate({"python_version": "3.11"})
    assert vllm.marker.evaluate({"python_version": "3.13"})


def test_a_missing_vllm_below_python_3_11_is_one_line():
    if installed_vllm() is not None:
        pytest.skip("vLLM is installed here: the missing case cannot be shown")
    with pytest.raises(RuntimeError) as e:
        check_vllm_version(python=(3, 10))
    msg = str(e.value)
    assert "\n" not in msg and "Python >= 3.11 (this is 3.10" in msg, msg
    check_vllm_version(python=(3, 11))  # missing on 3.11: left to the import's own message
