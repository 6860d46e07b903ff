"""Name -> implementation tables: one per recipe axis.

Every axis value a YAML can name (`loss.type: cispo`) is one small function registered under
exactly that name, and the config's allowed names are read from its registry
(trainer/config_parts/: `Literal[tuple(REGISTRY.names())]`), so registering is the only step.
The config imports no torch (`ablate` validates thousands of variants without it), so every
registry it reads is torch-free: loss.type, loss.aggregation, advantage.normalization,
length.control, data.curriculum and the task kinds register with a decorator beside their
torch-free functions (trainer/algo/, trainer/tasks.py); engine.type, off_policy.mode and
rollout.backend, whose implementations import torch, register `module:name` lazily in
trainer/torch_axes.py. (`logging.backends` reads trainer/trackers.py's BACKENDS, a plain dict:
each tracker imports its package only when opened.)
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of implementations with a decorator to fill it."""

    def __init__(self, axis: str) -> None:
        self.axis = axis
        self._items: dict[str, F] = {}
        self._lazy: dict[str, str] = {}
        self._options: dict[str, dict[str, float]] = {}

    def register(self, name: str, options: dict[str, float] | None = None) -> Callable[[F], F]:
        """`options`: the keyword options the implementation takes, with their defaults (a
        loss type's clip settings): the config validates a YAML's options against them."""
        def deco(fn: F) -> F:
            if name in self._items or name in self._lazy:
                raise ValueError(f"{self.axis}: {name!r} registered twice")
            self._items[name] = fn
            self._options[name] = dict(options or {})
            return fn

        return deco

    def options(self, name: str) -> dict[str, float]:
        """The options `name` was registered with and their defaults ({} for none)."""
        self.get(name)  # an unknown name: the KeyError listing the valid ones
        return dict(self._options.get(name, {}))

    def register_lazy(self, name: str, target: str) -> None:
        """Register `module:attr`, imported on first use (heavy optional deps: vllm, deepspeed)."""
        self._lazy[name] = target

    def get(self, name: str) -> F:
        if name not in self._items and name in self._lazy:
            import importlib

            module, attr = self._lazy[name].split(":")
            self._items[name] = getattr(importlib.import_module(module), attr)
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.axis} {name!r}; valid: {sorted(self.keys())}") from None

    def names(self) -> list[str]:
        """The names in the order they were registered: a config's Literal lists them so
        (what a validation error names as valid)."""
        return [*self._items, *(n for n in self._lazy if n not in self._items)]

    def keys(self) -> list[str]:
        return sorted(set(self._items) | set(self._lazy))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())
