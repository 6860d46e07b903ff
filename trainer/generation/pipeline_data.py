"""PipelineRL-k with data timing (`rollout.async_timing: data`): the pipeline's generator still
runs concurrently with the trainer and k steps ahead of it, but every decision that the wall
clock makes in the free-running pipeline (trainer/generation/offpolicy.py Pipeline) is fixed by the
stream's position instead, so the same config and seed replay the same run on any load.

What the clock decided there, and what decides it here:
- which prompts a call samples and with which seed: drawn by the trainer thread at a weight
  push, in stream order (the free-running generator thread draws them whenever it gets to,
  while the trainer records pass rates into the same pool: NPR retirements and curricula then
  depend on who came first);
- how many groups a call holds: always `groups_per_call` (there: whatever the k bound admitted
  at that instant);
- which weights start a call: version V(call) = base + max(0, step(last group) - base - k),
  the oldest the k bound allows, i.e. the weights that a generator faster than the trainer
  gets in PipelineRL (admitted the moment the push arrives);
- where an in-flight push lands (PipelineRL's mid-sequence weight update): token d of a call
  (counted over the rollout's generate calls) is sampled by version
  min(V + d // S, cap), S = rollout.inflight_switch_tokens (0: never mid-sequence), cap =
  step(first group), the weights its first group is trained with. S plays the trainer's
  step time in decode steps; cap is the newest version the trainer can push before it needs
  this call (pushing cap + 1 needs step cap, which needs this call: waiting for it would
  deadlock). So a token's lag is step - version in [0, k], its first token's exactly as
  before (max lag per step unchanged), later tokens fresher;
- the order groups enter the stream: one generator thread runs the calls in stream order.

Weights travel as snapshots: a push of v stores a copy of the trainer's weights (the trainer
never waits for a call to push); the generator loads the version its plan names at a call's
start and at each switch point (rollout.py HFGenerator.follow), blocking there until the
trainer has pushed it. A snapshot is dropped once no unfinished call can load it (calls not
scheduled yet start with versions not pushed yet); at most k + 1 are held (asserted): the oldest unfinished call c has V(c) >= step(last(c)) - k,
and a push p > step(first(c)) would need c trained.

Staleness is therefore exactly k for a call's first tokens in steady state (ramping 0, 1, ...,
k after the first push) and never above it: no group is ever refused as stale. Throughput is
the pipeline's max(generation, training) per step, less whatever the generator waits at
switch points for versions the trainer has not pushed yet.

Resume: a checkpoint (state()) saves, at a step boundary after the push, the finished groups
not trained on yet, the calls scheduled but not finished (the one running included: it is
redone from its start, with its seed and plan, on resume) and the snapshots those calls can
need that are older than the checkpoint's own weights; the pool and the seed counter were
advanced by the trainer thread when those calls were scheduled, so they are consistent with
it. A resumed run continues the stream exactly where the uninterrupted one would be.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from torch import nn

from trainer.dist import preempt
from trainer.dist.groups import rank
from trainer.generation.rollout import make_generator
from trainer.algo.length import generate_rollout
from trainer.generation.offpolicy import (Batch, Context, Pipeline, Source, _close, _join_push,
                                          concat, oldest_version, split)


class _Stopped(Exception):
    """close() while the generator waited for a push: the thread ends quietly."""


def pipeline(ctx: Context) -> Source:
    """off_policy.mode pipeline (registered in trainer/torch_axes.py MODES):
    PipelineRL-k timed by the data (DataPipeline below, reproducible) or by the wall clock
    (offpolicy.Pipeline)."""
    return Pipeline(ctx) if ctx.config.rollout.timing == "wall" else DataPipeline(ctx)


@dataclass
class Call:
    """One generate call, fixed when it is scheduled: prompts (pool indices), seed, weights
    (start version, in-flight switches every `switch` tokens up to `cap`; switch 0: none)."""

    prompt_ids: list[int]
    seed: int
    version: int
    cap: int
    switch: int

    def version_at(self, token: int) -> int:
        if not self.switch:
            return self.version
        return min(self.version + token // self.switch, self.cap)


class Plan:
    """A call's WeightPlan (trainer/generation/rollout.py) over the pipeline's snapshots."""

    def __init__(self, src: "DataPipeline", call: Call) -> None:
        self.src, self.call = src, call

    def version_at(self, token: int) -> int:
        return self.call.version_at(token)

    def weights(self, version: int) -> dict:
        return self.src.snapshot(version)


class DataPipeline:
    """PipelineRL-k, data-timed (see the module doc; hf only). Rank 0 feeds; other ranks get
    None from next()."""

    def __init__(self, ctx: Context) -> None:
        c = ctx.config
        self.ctx = ctx
        self.k, self.per_step = c.off_policy.k, c.rollout.prompts_per_step
        self.per_call = c.off_policy.groups_per_call or c.rollout.prompts_per_step
        self.cond = threading.Condition()
        self.calls: deque[Call] = deque()  # scheduled, not started (generator takes from the left)
        self.running: Call | None = None  # the call being generated
        r = c.rollout
        self.switch = (r.inflight_switch_tokens if r.inflight_switch_tokens is not None
                       else max(1, r.max_new_tokens // (self.k + 1)))
        self.snapshots: dict[int, dict] = {}  # pushed weights unfinished or future calls may need
        self.pushed: int | None = None  # the latest push's version
        self.finished: deque[Batch] = deque()  # groups not trained on yet, in stream order
        self.base: int | None = None  # weight version at the stream's first push
        self.scheduled = 0  # groups scheduled since the first push
        self.stale_dropped = 0  # stays 0: V(call) keeps every group within k (kept for the row)
        self.wait_seconds = 0.0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.feeds = rank() == 0
        self.gen = (make_generator(c, ctx.model, ctx.tokenizer, own_copy=True)
                    if self.feeds else None)
        if not self.feeds and c.rollout.backend == "vllm":
            _join_push(ctx.model)  # the engine's start-up push (VLLMGenerator.__init__)
        if ctx.restored is not None and self.feeds:
            self._restore(ctx.restored)
        ctx.saver = self.state
        self.thread = threading.Thread(target=self._produce, name="ablate-generator", daemon=True)
        if self.feeds:
            self.thread.start()

    # -- the schedule (trainer thread) ---------------------------------------------------------
    def version_for(self, last_group: int) -> int:
        """Weights of a call whose last group is group `last_group` of the stream (counted from
        the first push): that group is trained on at step base + last_group // per_step, and
        the oldest weights the k bound allows for it are k versions before that step."""
        return self.base + max(0, last_group // self.per_step - self.k)

    def _schedule(self, version: int) -> None:
        """Every call whose weights are `version` (or older: none are left by then): prompts
        and seeds drawn now, in stream order, after the trainer recorded the pass rates of
        every step before `version` and before it records step `version`'s."""
        c = self.ctx
        while self.version_for(self.scheduled + self.per_call - 1) <= version:
            seed = c.data.next_call_seed(c.config.seed)
            v = self.version_for(self.scheduled + self.per_call - 1)
            cap = max(v, self.base + self.scheduled // self.per_step)  # step of its first group
            call = Call(c.data.pool.next_batch(self.per_call), seed, v, cap, self.switch)
            self.scheduled += self.per_call
            with self.cond:
                self.calls.append(call)
                self.cond.notify_all()

    def _wait(self, done) -> None:
        """Block (trainer thread) until `done()` holds under the lock; surface generator errors."""
        with self.cond:
            while not done():
                if self.error is not None:
                    raise RuntimeError("generator thread failed") from self.error
                self.cond.wait(timeout=0.1)

    def _prune(self) -> None:
        """Drop the snapshots no unfinished call can load (under the lock). Calls not
        scheduled yet need none of them: every call whose start version has been pushed is
        scheduled, so later ones start with a version not pushed yet."""
        pending = ([self.running] if self.running is not None else []) + list(self.calls)
        keep = {v for call in pending
                for v in (range(call.version, call.cap + 1) if call.switch else [call.version])}
        for v in [v for v in self.snapshots if v not in keep]:
            del self.snapshots[v]
        assert len(self.snapshots) <= self.k + 1, (sorted(self.snapshots), self.k)

    def snapshot(self, version: int) -> dict:
        """Generator thread: version's weights, once the trainer has pushed them."""
        with self.cond:
            while version not in self.snapshots:
                if self.stop.is_set():
                    raise _Stopped()
                self.cond.wait(timeout=0.1)
            return self.snapshots[version]

    def after_step(self, model: nn.Module, version: int) -> None:
        if not self.feeds:
            if self.ctx.config.rollout.backend == "vllm":
                _join_push(model)  # under ZeRO-3 rank 0's push gathers from all ranks' shards
            return
        if self.error is not None and not isinstance(self.error, preempt.Stopped):
            raise RuntimeError("generator thread failed") from self.error
        # (A stop signal the generator thread took is the loop's to act on: next() hands it
        # over as the cause of its failure, trainer/loop/train.py next_batch, after this push.)
        # A copy, never waiting for a call: the generator loads it where its plans say.
        snap = {n: t.detach().clone() for n, t in model.state_dict().items()}
        if self.base is None:
            self.base = version
        with self.cond:
            self.snapshots[version], self.pushed = snap, version
            self.cond.notify_all()
        self._schedule(version)
        with self.cond:
            self._prune()

    # -- the generator thread ------------------------------------------------------------------
    def _produce(self) -> None:
        """Run the scheduled calls in order; a call's groups enter the stream when it returns."""
        c = self.ctx.config
        G = c.rollout.generations_per_prompt
        try:
            while True:
                with self.cond:
                    while not self.calls and not self.stop.is_set():
                        self.cond.wait(timeout=0.1)
                    if self.stop.is_set():
                        return
                    call = self.running = self.calls.popleft()
                t0 = time.perf_counter()
                self.gen.follow(Plan(self, call))
                ro = generate_rollout(self.gen, [self.ctx.prompts[i] for i in call.prompt_ids], c,
                                      self.ctx.tokenizer, call.seed,
                                      n=G, temperature=c.rollout.temperature)
                if any(v and (v[0] != call.version or max(v) > call.cap) for v in ro.versions):
                    raise RuntimeError(f"data-timed pipeline: a call planned for weights "
                                       f"{call.version}..{call.cap} was sampled by "
                                       f"{sorted({x for v in ro.versions for x in v})}")
                groups = split(Batch(call.prompt_ids, ro, time.perf_counter() - t0),
                               len(call.prompt_ids), G)
                with self.cond:
                    self.finished.extend(groups)
                    self.running = None
                    self.cond.notify_all()
        except _Stopped:
            return
        except BaseException as e:  # surfaced in the trainer thread by next() / after_step()
            with self.cond:
                self.error = e
                self.cond.notify_all()

    # -- the trainer's side of the stream ------------------------------------------------------
    def next(self, version: int) -> Batch | None:
        """The next step's batch: the next prompts_per_step groups of the stream, in order."""
        if not self.feeds:
            return None
        if self.base is None:
            raise RuntimeError("pipeline source: next() before any after_step(model, version); "
                               "the loop stamps the generator's weights first")
        t0 = time.perf_counter()
        self._wait(lambda: len(self.finished) >= self.per_step)
        with self.cond:
            groups = [self.finished.popleft() for _ in range(self.per_step)]
        self.wait_seconds += time.perf_counter() - t0
        for g in groups:  # by construction (version_for); a failure here is a scheduling bug
            if version - oldest_version(g, version) > self.k:
                raise RuntimeError(f"data-timed pipeline: a group sampled by weights "
                                   f"{oldest_version(g, version)} reached step {version} "
                                   f"(k={self.k})")
        return concat(groups)

    # -- checkpoint / resume -------------------------------------------------------------------
    def state(self) -> dict:
        """What a resumed run needs to continue this stream exactly (trainer thread, at a step
        boundary after the push; waits for nothing): the unconsumed groups, the calls not
        finished (redone from their start on resume, same seed and plan: a call's tokens
        depend only on them) and the snapshots those calls may need that are older than the
        weights being saved (the resumed loop pushes those again)."""
        with self.cond:
            pending = ([self.running] if self.running is not None else []) + list(self.calls)
            now = self.pushed
            return {"timing": "data", "base": self.base, "scheduled": self.scheduled,
                    "finished": list(self.finished), "stale_dropped": self.stale_dropped,
                    "calls": pending,
                    "snapshots": {v: w for v, w in self.snapshots.items() if v != now}}

    def _restore(self, s: dict) -> None:
        if s.get("timing") != "data":
            return  # saved by another source (e.g. a wall-timed run): start the stream afresh
        self.base, self.scheduled = s["base"], s["scheduled"]
        self.finished.extend(s["finished"])
        self.stale_dropped = s["stale_dropped"]
        self.calls.extend(s.get("calls", []))
        self.snapshots.update(s.get("snapshots", {}))

    def stop_generating(self) -> None:
        """No rollout can be trained on any more: the generator thread ends (at its next
        decode step or wait); the generator stays for the last eval until close()."""
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        if self.feeds:
            self.thread.join(timeout=60)

    def close(self) -> None:
        self.stop_generating()
        if self.feeds:
            _close(self.gen)
