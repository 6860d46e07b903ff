"""Name -> implementation tables: one per recipe axis.

Every axis value a YAML can name (`loss.type: cispo`) is one small function registered under
exactly that name, so a study's vocabulary and the code cannot drift apart (a test checks the
Literal names in `trainer/config.py` against these keys).
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

    def register(self, name: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._items or name in self._lazy:
                raise ValueError(f"{self.axis}: {name!r} registered twice")
            self._items[name] = fn
            return fn

        return deco

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

    def keys(self) -> list[str]:
        return sorted(set(self._items) | set(self._lazy))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())
