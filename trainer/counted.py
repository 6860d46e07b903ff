"""`1 engine`, `2 engines`: a count with its noun agreed, in the trainer's plans and messages
(never `1 engines` nor `engine(s)`).

The same rule as ablate/number_text.py's `count`, which the CLI's own words use: the trainer
imports nothing of ablate (the layer rule, tests/test_layers.py), and ablate's modules outside
its built-in adapter import nothing of the trainer, so each side says it once.
"""

from __future__ import annotations

from typing import Optional


def count(n: int, noun: str, plural: Optional[str] = None) -> str:
    """`1 GPU`, `2 GPUs`, `1,200 problems`; `plural` where adding an `s` is wrong."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
