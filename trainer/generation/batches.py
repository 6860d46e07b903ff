"""A step's batch, and how the pipeline's finished prompt groups become one: `Batch` (a
step's prompts and rollout), `concat` (groups or feeders' shares joined in order),
`oldest_version` (a group's staleness) and `GroupStream`, PipelineRL's admission rule between
the free-running generator thread and the trainer (trainer/generation/offpolicy.py Pipeline).

Why a module of its own: these are the data the sources hand the loop (trainer/loop/train.py
joins feeders' shares with `concat`), apart from the sources that make them.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

from trainer.rollouts import Rollout


@dataclass
class Batch:
    prompt_ids: list[int]  # pool index of each prompt (samples are prompt-major, G per prompt)
    rollout: Rollout
    gen_seconds: float
    # Tokens the generator ran for batches refused as too stale just before this one: their
    # generation was spent, so it counts in the generation FLOPs.
    dropped_gen_tokens: int = 0


def oldest_version(b: Batch, default: int) -> int:
    """Policy version of the oldest token in `b` (its first token: versions only grow along
    a sample, in-flight pushes make later tokens newer)."""
    return min((v[0] for v in b.rollout.versions if v), default=default)


def concat(parts: list[Batch]) -> Batch:
    """Prompt groups (or minibatches) joined into one batch, in order."""
    ros = [b.rollout for b in parts]
    fields = ("prompts", "tokens", "logprobs", "versions", "loss_mask", "finished",
              "interrupted", "penalty", "gen_tokens")
    ro = Rollout(**{f: [x for r in ros for x in getattr(r, f)] for f in fields})
    return Batch([i for b in parts for i in b.prompt_ids], ro, sum(b.gen_seconds for b in parts),
                 sum(b.dropped_gen_tokens for b in parts))


class GroupStream:
    """Finished prompt groups flowing from the generator thread to the trainer, with
    PipelineRL's admission rule (ServiceNow/PipelineRL actor.py, `max_lag`): the generator may
    start (k + 1) steps' worth of groups before the first weight push and one step's worth
    more after each push. Group N of the stream (counting from the first push) is trained on
    at step base + N // groups_per_step and was started with weights >= that step - k, so a
    fast generator runs exactly k steps ahead and staleness reaches k but never exceeds it.
    With a step budget (`last`: the version of the last batch taken, budget.steps - 1) no
    group is started that no batch would take: the generator does not run k steps past the
    run's end.
    The trainer still refuses a group whose oldest token is more than k versions old (a
    safety net; such a group's slot is handed back to the generator)."""

    def __init__(self, k: int, groups_per_step: int, last: int | None = None) -> None:
        self.k, self.per_step = k, groups_per_step
        self.last = last  # the last step's version a batch is taken for (None: not known)
        self.finished: queue.Queue[Batch] = queue.Queue()
        self.cond = threading.Condition()
        self.base: int | None = None  # weight version at the stream's first push
        self.pushed = 0  # latest pushed weight version
        self.started = 0  # groups the generator has started
        self.refunded = 0  # slots handed back by groups refused as stale
        self.stale_dropped = 0
        self.wait_seconds = 0.0
        self.held = False  # rollout scheduling paused: an eval decodes on the engines

    def hold(self, on: bool) -> None:
        """Pause (True) or resume the start of new groups: while an eval decodes on every
        engine of the fleet (trainer/loop/final_eval.py), as PipelineRL's actor pauses its
        train loop's scheduling during a test loop (ServiceNow/PipelineRL pipelinerl/actor.py
        run_actor_loop: `train_loop.is_scheduling_paused = True`). Groups in flight finish."""
        with self.cond:
            self.held = on
            self.cond.notify_all()

    def push(self, version: int) -> None:
        """The trainer pushed weights `version`: one more step's worth of groups may start."""
        with self.cond:
            self.base = version if self.base is None else self.base
            self.pushed = version
            self.cond.notify_all()

    def allowance(self) -> int:
        """Groups the generator may start now (caller holds the lock)."""
        if self.base is None or self.held:
            return 0
        limit = (self.k + 1 + self.pushed - self.base) * self.per_step + self.refunded
        if self.last is not None:  # no group past the last batch: nothing could train on it
            limit = min(limit, (self.last + 1 - self.base) * self.per_step + self.refunded)
        return limit - self.started

    def admit(self, want: int, stop: threading.Event) -> int:
        """Block until some groups may start; reserve and return up to `want` (0: stopping)."""
        with self.cond:
            while not stop.is_set():
                n = min(want, self.allowance())
                if n > 0:
                    self.started += n
                    return n
                self.cond.wait(timeout=0.1)
        return 0

    def put(self, group: Batch) -> None:
        self.finished.put(group)

    def take(self, version: int, failed: Callable[[], BaseException | None]) -> Batch:
        """The next step's batch: `groups_per_step` finished groups at most k versions old,
        in the order they finished; waits while there are not enough."""
        t0, groups, dropped = time.perf_counter(), [], 0
        while len(groups) < self.per_step:
            err = failed()
            if err is not None:
                raise RuntimeError("generator thread failed") from err
            try:
                g = self.finished.get(timeout=0.1)
            except queue.Empty:
                if self.base is None:  # nothing may start before the first push: no wait ends
                    raise RuntimeError("pipeline source: next() before any after_step(model, "
                                       "version); the loop stamps the generator's weights first")
                continue
            if version - oldest_version(g, version) <= self.k:
                groups.append(g)
                continue
            self.stale_dropped += 1
            dropped += sum(g.rollout.gen_tokens) + g.dropped_gen_tokens
            with self.cond:
                self.refunded += 1
                self.cond.notify_all()
        self.wait_seconds += time.perf_counter() - t0
        b = concat(groups)
        b.dropped_gen_tokens += dropped
        return b
