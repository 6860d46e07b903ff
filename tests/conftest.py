"""Shared test setup: offline hubs, small thread counts, and skip-with-reason helpers."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Models the tests warm up are built fresh for each test session (subprocesses inherit the
# variable): a cache left by older code or another machine must never decide an outcome.
os.environ.setdefault("ABLATE_CACHE", tempfile.mkdtemp(prefix="ablate-test-cache-"))


@pytest.fixture
def usr2():
    """The trainer's stop-flag handler on USR2 for the test (trainer/preempt.py), restored
    afterwards (test_preempt.py, test_async_eval.py)."""
    from trainer import preempt

    preempt.reset()
    old = preempt.install(signal.SIGUSR2)
    yield
    signal.signal(signal.SIGUSR2, old)
    preempt.reset()
