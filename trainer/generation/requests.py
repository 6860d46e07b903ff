"""What goes into and comes out of the generation service (trainer/generation/service.py):
a module of their own so the interface and its backends (service.py, stream.py) share them
without importing each other."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Hashable, Iterator, Optional, Union

from torch import nn

from trainer.rollouts import Rollout

Weights = Union[nn.Module, dict]  # the trainer's module, or a snapshot of its state dict


@dataclass
class Request:
    """Prompts (token ids), `n` samples each, drawn with the run's length control."""

    tag: Hashable  # the caller's handle on the result
    prompts: list[list[int]]
    n: int
    temperature: float
    seed: int  # prompt i's samples use seed + i*n + j (vLLM's parallel-sampling children)
    # An eval's pinned engines (trainer/generation/pins.py Pin): its samples go only there.
    # None: the engines that take rollouts. Engine streams only (stream.py).
    pin: Optional[object] = None


@dataclass
class Result:
    tag: Hashable
    rollout: Optional[Rollout] = None
    error: Optional[BaseException] = None  # preempt.Stopped: a stop signal ended it
    versions: tuple[Optional[int], Optional[int]] = (None, None)  # oldest, newest token version


def version_range(ro: Rollout) -> tuple[Optional[int], Optional[int]]:
    vs = [v for row in ro.versions for v in row]
    return (min(vs), max(vs)) if vs else (None, None)


def finished(done: "queue.Queue[Result]", timeout: Optional[float]) -> Iterator[Result]:
    """A service's `results`: finished requests as they finish, from its `done` queue; ends when
    none finishes within `timeout` s (every service implements results() this way)."""
    while True:
        try:
            yield done.get(timeout=timeout)
        except queue.Empty:
            return
