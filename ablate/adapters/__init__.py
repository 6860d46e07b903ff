"""Trainer adapters: run a study's variants on TRL, verl or any command (`trainer:` block).

`adapter_for(spec)` builds the adapter a study names, from `ADAPTERS` (kind -> builder). Each
adapter lives in its own module and imports its trainer only when asked to validate, so the
modules are imported here at once and `ablate` still runs without TRL or verl installed.
"""

from __future__ import annotations

from typing import Callable

from ablate.adapters.base import Adapter, TrainerSpec
from ablate.adapters.command import CommandAdapter
from ablate.adapters.trl import TRLAdapter
from ablate.adapters.verl import VerlAdapter

# `trainer.kind` -> the adapter built from the `trainer:` block (the built-in trainer has none)
ADAPTERS: dict[str, Callable[[TrainerSpec], Adapter]] = {
    "trl": lambda spec: TRLAdapter(spec.command),
    "verl": lambda spec: VerlAdapter(spec.config_dir, spec.config_name),
    "command": CommandAdapter,
}


def adapter_for(spec: TrainerSpec) -> Adapter:
    """The adapter of a non-ablate `trainer:` block."""
    if spec.kind not in ADAPTERS:
        raise ValueError(f"no adapter for trainer kind {spec.kind!r} (the built-in trainer)")
    return ADAPTERS[spec.kind](spec)


__all__ = ["ADAPTERS", "Adapter", "TrainerSpec", "adapter_for"]
