"""The fast tier keeps itself fast: tests/conftest.py fails a test with no tier marker that
uses more CPU than the tier allows or starts a Python process, and passes one that does
neither, and lists at the end the fast tests that passed above the margin (half the limit).
Run in a pytest of its own (pytester, a subprocess) with this suite's conftest."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PROBES = '''
import subprocess, sys, time
import pytest

def test_spins():
    t = time.process_time()
    while time.process_time() - t < 0.6:
        pass

def test_near_the_limit():  # passes, but over the margin (half the limit): listed at the end
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass

def test_starts_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_cheap():
    assert sum(range(1000)) == 499500

@pytest.fixture(scope="module")
def shared_build():  # a module's shared set-up (a warmed mini model): charged to itself
    t = time.process_time()
    while time.process_time() - t < 0.6:
        pass

def test_uses_the_shared_build(shared_build):
    pass

@pytest.mark.slow
def test_marked_slow_may_do_both():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.mark.slow
def test_fast_tier_refuses_cpu_and_python_processes(pytester, monkeypatch):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: x\n    slurm: x\n    deepspeed: x\n"
                     "    vllm: x\n")
    pytester.makepyfile(test_probes=PROBES)
    monkeypatch.setenv("ABLATE_FAST_CPU_LIMIT_S", "0.3")
    monkeypatch.setenv("ABLATE_FAST_SHARED_FIXTURE_CPU_LIMIT_S", "2")
    monkeypatch.setenv("ABLATE_TEST_PREIMPORT", "0")  # the probes import neither torch nor ablate
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = r.stdout.str()
    r.assert_outcomes(passed=4, failed=2)  # the shared build's 0.6 s is not the test's
    near = out[out.index("fast tests near the CPU limit"):]
    assert "1 fast test(s) used more than 50% of the 0.3-s CPU limit" in near, near
    assert "test_probes.py::test_near_the_limit" in near and "test_cheap" not in near, near
    monkeypatch.setenv("ABLATE_FAST_SHARED_FIXTURE_CPU_LIMIT_S", "0.3")
    over = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "shared")
    over.assert_outcomes(failed=1)
    assert "shared fixture 'shared_build' used" in over.stdout.str(), over.stdout.str()
    assert "test_spins is in the fast tier" in out and "s of CPU" in out, out
    assert "test_starts_python is in the fast tier" in out and "started 1 process" in out, out
    selected = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "fast",
                                             "-k", "cheap or slow")
    selected.assert_outcomes(passed=1, deselected=5)
