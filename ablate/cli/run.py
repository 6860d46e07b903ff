"""CLI commands: run (placeholder until implemented)."""

from ablate.cli import app  # noqa: F401
