"""Eval engines pinned at their step's weights: every sample of an eval row comes from one policy.

Why: in pipeline mode the trainer pushes new weights after every step, in flight. An eval that
shares the rollout engines (as it did) is decoded by every version pushed while it runs: at the
paper's scale a 13.8-h eval at 20-min steps mixed ~40 policies into a row logged at one step,
so every point of every fitted curve mixed policies.

The choices, and why this one. A lab could (a) stop training while eval decodes on every engine
(one policy; the whole job idles for the eval), (b) keep a snapshot engine for eval (one policy;
GPUs of its own that idle between evals), or (c) take some of the rollout engines out of the
rollout set for the eval's duration, pushes paused on them. (c) costs nothing in the common,
generation-bound case beyond what the eval's tokens cost anyway: they displace rollout tokens
on rank 0's node's engines whichever way they are decoded (the time plan's eval term,
trainer/plan/time_plan.py `eval_cost_s`), needs no extra GPUs and never makes the trainer wait.
So: an eval pins `eval_engines(R)` of rank 0's node's R engines (trainer/plan/placement.py: half
of them, at least one) at the step's weights when it is launched. While pinned an engine takes
no push and no new rollout sample; the eval's samples go only to it; rollout samples that were
already running on it finish on the step's weights (no newer than what the k bound admitted, so
PipelineRL-k still binds). When the eval ends the engine rejoins the rollout set at the next
push, which brings it to the trainer's weights (until then it holds older weights, so it takes
no rollout sample: a sample on them could exceed the k bound). An eval due while earlier ones
hold the engines it needs waits for them before its push (eval_service.py wait_for_engines), so
it too is pinned at its own step.

One engine (R = 1: a single engine, or a node whose engine is tensor-parallel over all its
generation GPUs) cannot be split: its pin is shared, it keeps serving rollouts, and a push waits
until the eval ends, so the trainer waits for the eval (that case's cost, in the plan too).

This module is the bookkeeping only (pure Python): the generators (vllm_engine.py, replicas.py)
consult it for whom a push reaches, the stream (stream.py) for where a sample may go.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Pin:
    """The engines one eval holds, and the weights' version they hold."""

    engines: tuple[int, ...]
    version: int


class Pins:
    """Which engines evals hold, the version each engine holds, the newest version pushed."""

    def __init__(self, engines: int, version: int = 0) -> None:
        self.n = engines
        self.exclusive = engines > 1  # several engines: eval's are taken out of rollouts
        self.holds = [0] * engines  # evals holding each engine
        self.versions = [version] * engines  # the weights each engine holds
        self.latest = version  # the newest version pushed
        self.pushing: set[int] = set()  # engines a push is streaming into now (begin_push)
        self.cond = threading.Condition()

    def take(self, want: int, version: Optional[int] = None) -> Optional[Pin]:
        """Pin up to `want` engines holding `version` (None: the newest) for one eval.
        Several engines: free ones only, always leaving one free engine with the newest
        weights for rollouts; None when none can be pinned (the caller pins later, on newer
        weights). One engine: always (shared)."""
        with self.cond:
            if not self.exclusive:  # the one engine: not while a push streams into it
                self.cond.wait_for(lambda: not self.pushing)
                self.holds[0] += 1
                return Pin((0,), self.versions[0])
            v = self.latest if version is None else version
            # an engine a push is streaming into is not pinned: its weights are changing (the
            # late-pin race: a pin between the push's targets and pushed() got new weights)
            free = [i for i in range(self.n) if not self.holds[i] and i not in self.pushing]
            ready = [i for i in free if self.versions[i] == v]
            fresh = [i for i in free if self.versions[i] == self.latest]  # rollouts' engines
            room = len(ready) - (1 if v == self.latest else 0) if fresh else 0
            got = tuple(ready[:max(0, min(want, room))])
            if not got:
                return None
            for i in got:
                self.holds[i] += 1
            return Pin(got, v)

    def wait_pinnable(self, timeout: float) -> bool:
        """Wait up to `timeout` s until an eval could pin an engine once a push has brought
        the free engines to the newest weights: two engines free (one for it, one left for
        rollouts), or one engine (shared). True when it can."""
        with self.cond:
            return self.cond.wait_for(
                lambda: not self.exclusive or self.holds.count(0) >= 2, timeout)

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` s for any change (a push ended, a pin released)."""
        with self.cond:
            self.cond.wait(timeout=timeout)

    def release(self, pin: Pin) -> None:
        with self.cond:
            for i in pin.engines:
                self.holds[i] -= 1
            self.cond.notify_all()

    def push_targets(self) -> list[int]:
        """Engines a push reaches now: every engine not pinned by an eval (one engine: all)."""
        with self.cond:
            return [i for i in range(self.n) if not (self.exclusive and self.holds[i])]

    def begin_push(self, force: bool = False) -> Optional[list[int]]:
        """The engines a push reaches (push_targets), marked as being pushed until end_push:
        no eval pins them meanwhile (take). None while the one engine is pinned by an eval
        (the push waits: must_wait), unless `force` (a stop cuts the push at once)."""
        with self.cond:
            if not self.exclusive and self.holds[0] and not force:
                return None
            targets = [i for i in range(self.n) if not (self.exclusive and self.holds[i])]
            self.pushing = set(targets)
            return targets

    def end_push(self, targets: list[int], version: Optional[int]) -> None:
        """The push begun by begin_push ended: `targets` hold `version` (None: cut, torn)."""
        with self.cond:
            self.pushing = set()
            if version is not None:
                for i in targets:
                    self.versions[i] = version
                self.latest = version
            self.cond.notify_all()

    def must_wait(self) -> bool:
        """A push must wait: the one engine is pinned (shared) by an eval still decoding."""
        with self.cond:
            return not self.exclusive and self.holds[0] > 0

    def wait_released(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a shared pin to end; True when a push may go."""
        with self.cond:
            return self.cond.wait_for(lambda: self.exclusive or not self.holds[0], timeout)

    def pushed(self, targets: list[int], version: int) -> None:
        with self.cond:
            for i in targets:
                self.versions[i] = version
            self.latest = version
            self.cond.notify_all()

    def rollout_engines(self) -> list[int]:
        """Engines a new rollout sample may go to: not pinned by an eval and holding the
        newest weights (an engine an eval released waits for the next push)."""
        with self.cond:
            return [i for i in range(self.n) if not (self.exclusive and self.holds[i])
                    and self.versions[i] == self.latest]
