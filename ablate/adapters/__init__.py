"""Trainer adapters: run a study's variants on TRL, verl or any command (`trainer:` block).

`adapter_for(spec)` builds the adapter a study names; each lives in its own module and imports
its trainer only when asked to validate, so `ablate` runs without TRL or verl installed.
"""

from __future__ import annotations

from ablate.adapters.base import Adapter, TrainerSpec


def adapter_for(spec: TrainerSpec) -> Adapter:
    """The adapter of a non-ablate `trainer:` block."""
    if spec.kind == "trl":
        from ablate.adapters.trl import TRLAdapter

        return TRLAdapter(spec.command)
    if spec.kind == "verl":
        from ablate.adapters.verl import VerlAdapter

        return VerlAdapter(spec.config_dir, spec.config_name)
    if spec.kind == "command":
        from ablate.adapters.command import CommandAdapter

        return CommandAdapter(spec)
    raise ValueError(f"no adapter for trainer kind {spec.kind!r} (the built-in trainer)")


__all__ = ["Adapter", "TrainerSpec", "adapter_for"]
