"""Shared test setup: offline hubs, small thread counts, and skip-with-reason helpers."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Models the tests warm up are built fresh for each test session (subprocesses inherit the
# variable): a cache left by older code or another machine must never decide an outcome.
os.environ.setdefault("ABLATE_CACHE", tempfile.mkdtemp(prefix="ablate-test-cache-"))
