"""CLI commands: curves (placeholder until implemented)."""

from ablate.cli import app  # noqa: F401
