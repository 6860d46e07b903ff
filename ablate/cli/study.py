"""CLI commands: study (placeholder until implemented)."""

from ablate.cli import app  # noqa: F401
