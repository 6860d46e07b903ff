"""Off-policy modes (`off_policy.mode`, registered by name in trainer/torch_axes.py): where
each optimizer step's batch comes from.

ppo_off_policy (PPO-off-policy-k): generate k steps' worth of prompts with the current weights,
then take k optimizer steps on its minibatches (k=1 is plain on-policy).
pipeline (PipelineRL-k, ScaleRL): a generator thread on rank 0 with its own copy of the model
streams finished prompt groups while the trainer updates; after every optimizer step the new
weights are pushed, each token recording the version that sampled it; each step's batch is the
next prompts_per_step finished groups. The generator runs at most k steps ahead (PipelineRL's
max_lag rule), so the staleness of the tokens trained on reaches k when generation outpaces
training and never exceeds it. `rollout.async_timing` picks who decides where the weights
change: the data (trainer/generation/pipeline_data.py DataPipeline: reproducible, the default
with hf) or the wall clock (`Pipeline` below: free-running, pushes land mid-sequence when they
arrive).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from torch import nn

from trainer.config import TrainConfig
from trainer.dist.groups import all_reduce_floats, rank, world_size
from trainer.algo.length import generate_rollout
from trainer.algo.pool import DataPosition
from trainer.generation.rollout import make_generator
from trainer.rollouts import Generator, Rollout
from trainer.dist import preempt
from trainer.generation.feeders import feeders, step_batch, strided
from trainer.plan.placement import shares
from trainer.generation.push import join_weight_gathers
from trainer.generation.batches import (  # noqa: F401 (re-exported: the sources' batch)
    Batch, GroupStream, concat, oldest_version)


@dataclass
class Context:
    config: TrainConfig
    model: nn.Module
    tokenizer: object
    data: DataPosition  # the prompt pool and the generate-call counter (the run's state)
    prompts: list[list[int]]  # token ids of every training prompt
    # The source's state from the checkpoint this run resumed from (its `state()`), or None.
    restored: object = None
    # Set by the source: its state for a checkpoint (trainer/loop/checkpoint.py saves it).
    saver: Callable[[], object] | None = None

    def source_state(self) -> object:
        """What the source needs to continue exactly after a resume (None: nothing)."""
        return self.saver() if self.saver is not None else None


class Source(Protocol):
    def next(self, version: int) -> Batch: ...

    def after_step(self, model: nn.Module, version: int) -> None: ...

    def stop_generating(self) -> None:
        """The run's last batch is trained: generate nothing more (idempotent); the
        generator and its engines stay up for the last eval until close()."""

    def close(self) -> None: ...


def draw(ctx: Context, n_prompts: int, share: int = 0, count: int = 1,
         width: int | None = None) -> tuple[list[int], int]:
    """A generate call's prompts from the pool and its seed (prompt j samples with seed + j*G).
    With `count` feeders (trainer/generation/feeders.py), feeder `share` keeps its stride of a
    draw for all of them (a draw of count x n: its stream positions stay = share mod count
    whatever n), and its seeds start past the shares before it, each `width` (the largest call
    any feeder makes; default n) wide: no two nodes' prompts of one call share a seed even
    where the shares are dealt unevenly. One feeder: the pool's next n prompts, as always."""
    c = ctx.config
    idx = strided(ctx.data.pool.next_batch(n_prompts * count), share, count)
    seed = (ctx.data.next_call_seed(c.seed)
            + share * (width or n_prompts) * c.rollout.generations_per_prompt)
    return idx, seed


def sample(gen: Generator, ctx: Context, n_prompts: int, share: int = 0,
           count: int = 1, width: int | None = None) -> Batch:
    """Draw prompts from the pool (this feeder's share) and generate G samples each (with
    length control)."""
    c = ctx.config
    idx, seed = draw(ctx, n_prompts, share, count, width)
    t0 = time.perf_counter()
    ro = generate_rollout(gen, [ctx.prompts[i] for i in idx], c, ctx.tokenizer, seed,
                          n=c.rollout.generations_per_prompt, temperature=c.rollout.temperature)
    return Batch(idx, ro, time.perf_counter() - t0)


def split(batch: Batch, k: int, g: int) -> list[Batch]:
    """k minibatches of whole prompt groups."""
    n = len(batch.prompt_ids)
    out = []
    for j in range(k):
        a, b = j * n // k, (j + 1) * n // k
        ro = batch.rollout
        sl = slice(a * g, b * g)
        out.append(Batch(batch.prompt_ids[a:b], Rollout(
            ro.prompts[sl], ro.tokens[sl], ro.logprobs[sl], ro.versions[sl], ro.loss_mask[sl],
            ro.finished[sl], ro.interrupted[sl], ro.penalty[sl], ro.gen_tokens[sl]),
            batch.gen_seconds / k))
    return out


class PPOOffPolicy:
    """One big generation (k x prompts_per_step prompts), then k optimizer steps on its parts.

    With vllm the engines are every node's (trainer/plan/topology.py: the same per-node split
    as pipeline mode, run synchronously): each node's local rank 0 is a feeder
    (trainer/generation/feeders.py) and generates its dealt share of the big generation on its
    node's engines, all nodes at once; the shares are then joined in node order on every rank
    (an all-gather) and rank 0 keeps the k minibatches, which the loop broadcasts one a step
    (`step_ranks`). Meanwhile every rank polls (`_in_turns`) instead of waiting hours in one
    collective. The other ranks only join the ZeRO-3 gathers of each weight push. The
    shares are contiguous slices of the one draw a single feeder would make, each sampled with
    that draw's seeds (prompt j with seed + j x G), so the big batch is the one-node run's
    whatever the node count, and every feeder's pool advances alike. Evals go over every
    node's engines at their step's weights (trainer/loop/final_eval.py: the source's
    `feeders`); no rollout is in flight between steps. With hf every rank decodes the same
    batch itself (under ZeRO-3 the decode's all-gathers need every rank)."""

    # The step's batch is rank 0's, broadcast by the loop (trainer/loop/train.py next_batch):
    # the feeders' shares were joined at the big generation already.
    step_ranks = (0,)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        c = ctx.config
        self.feeders = feeders(c)  # collective: every rank, in the same place
        self.feeds = self.feeders.share is not None or c.rollout.backend == "hf"
        # who holds the minibatches: rank 0 (vllm: the loop broadcasts them), or every rank
        # under hf (each decoded the same batch itself)
        self.keeps = rank() == 0 or c.rollout.backend == "hf"
        self.gen = make_generator(c, ctx.model, ctx.tokenizer) if self.feeds else None
        if not self.feeds:
            _join_push(ctx.model)  # the engines' start-up push (VLLMGenerator.__init__)
        self.buffer: list[Batch] = []
        self.left = 0  # steps still to take from the current big generation (every rank)
        if isinstance(ctx.restored, dict) and ctx.restored.get("source") == "ppo_off_policy":
            # resumed between the k steps of one big generation: its unused minibatches
            self.left, self.buffer = ctx.restored["left"], list(ctx.restored["buffer"])
        ctx.saver = self.state

    def next(self, version: int) -> Batch | None:
        c = self.ctx.config
        if self.left == 0:  # a new big generation, on the same step on every rank
            if self.gen is not None:
                self.gen.sync_weights(self.ctx.model, version)
            else:
                _join_push(self.ctx.model)
            big = self._generate()
            self.buffer = split(big, c.off_policy.k, c.rollout.generations_per_prompt) \
                if big is not None else []
            self.left = c.off_policy.k
        self.left -= 1
        return self.buffer.pop(0) if self.keeps else None

    def _generate(self) -> Batch | None:
        """The big generation: this feeder's dealt share (placement.py shares, dealt_groups),
        the shares joined in node order on every rank where several nodes generate; kept on
        rank 0 (under hf on every rank, each of which decodes it all). A stop signal inside
        any node's generation reaches every rank as preempt.Stopped."""
        c, f = self.ctx.config, self.feeders
        work = self._share if self.gen is not None else None
        if c.rollout.backend == "vllm" and world_size() > 1:
            mine = _in_turns(work, next(self.ctx.model.parameters()).device)
        else:  # one process, or hf (every rank decodes in lockstep): nobody waits
            mine = work() if work is not None else None
        if f.count == 1:
            return mine
        # every share is done (a stop raised above): the join is quick, on every rank
        return step_batch(mine, f.ranks, preempt.STOP, _joined if self.keeps else _dropped)

    def _share(self) -> Batch:
        """This feeder's contiguous slice of the draw one feeder would make, sampled with that
        draw's seeds (the class doc): every feeder draws alike, so the pools stay equal."""
        c, ctx, f = self.ctx.config, self.ctx, self.feeders
        n, G = c.rollout.prompts_per_step * c.off_policy.k, c.rollout.generations_per_prompt
        idx = ctx.data.pool.next_batch(n)
        seed = ctx.data.next_call_seed(c.seed)
        a, b = _bounds(n, f.count, f.share or 0)
        t0 = time.perf_counter()
        ro = generate_rollout(self.gen, [ctx.prompts[i] for i in idx[a:b]], c, ctx.tokenizer,
                              seed + a * G, n=G, temperature=c.rollout.temperature)
        return Batch(idx[a:b], ro, time.perf_counter() - t0)

    def after_step(self, model: nn.Module, version: int) -> None:
        pass  # weights reach the engines only at the next big generation (or an eval)

    def stop_generating(self) -> None:
        pass  # it generates only inside next()

    def state(self) -> dict:
        """The current big generation's unused minibatches (a resume mid-way takes them, as
        the uninterrupted run does; ranks other than 0 keep only the count under vllm)."""
        return {"source": "ppo_off_policy", "left": self.left, "buffer": list(self.buffer)}

    def close(self) -> None:
        if self.gen is not None:
            _close(self.gen)


POLL_S = 1.0  # seconds between the ranks' agreements while a big generation runs


def _stopped(e: BaseException) -> bool:
    return isinstance(e, preempt.Stopped) or isinstance(e.__cause__, preempt.Stopped)


def _in_turns(work: Callable[[], Batch] | None, device) -> Batch | None:
    """Run `work` (this rank's share of a big generation; None on a rank that generates
    nothing) in a thread while every rank agrees every POLL_S whether any is still busy, a
    stop arrived or one failed: one small all-reduce, as trainer/loop/final_eval.py does for
    an eval. Why: the other ranks would otherwise wait for the whole big generation (k steps'
    decoding: ~2.5 h for the paper recipe on 2 nodes) inside one collective, which the
    group's timeout (engine.collective_timeout_minutes, 120 min) ends. A stop anywhere raises
    preempt.Stopped on every rank (this rank's decode ends at its next step); a failure
    raises on every rank, the failing one's own error."""
    out: list[Batch] = []
    errors: list[BaseException] = []
    thread = None
    if work is not None:
        def run() -> None:
            try:
                out.append(work())
            except BaseException as e:  # noqa: BLE001 - a stop, or the failure all must see
                errors.append(e)

        thread = threading.Thread(target=run, name="ablate-big-generation", daemon=True)
        thread.start()
    while True:
        if thread is not None:
            thread.join(timeout=POLL_S)
        else:
            time.sleep(POLL_S)
        failed = any(not _stopped(e) for e in errors)
        stop = preempt.requested() or any(_stopped(e) for e in errors)
        busy = thread is not None and thread.is_alive()
        busy, stop, failed_any = all_reduce_floats(
            [float(busy and not failed), float(stop), float(failed)], device, "max")
        if failed_any:
            if failed:
                raise next(e for e in errors if not _stopped(e))
            raise RuntimeError("another node's big generation failed (its own error ends it)")
        if stop:
            preempt.peer_stopped()  # ends this rank's decode at its next step too
            if thread is not None:
                thread.join()
            raise preempt.Stopped("stop signal inside the big generation")
        if not busy:
            return out[0] if out else None


def _dropped(parts: list[Batch]) -> None:
    """A rank that keeps no minibatches (vllm, not rank 0): the shares are not joined here."""
    return None


def _joined(parts: list[Batch]) -> Batch:
    """The nodes' shares of a big generation in node order; its wall is the slowest share's
    (the nodes generated at once), not their sum."""
    out = concat(parts)
    out.gen_seconds = max(b.gen_seconds for b in parts)
    return out


def _bounds(n: int, count: int, share: int) -> tuple[int, int]:
    """Feeder `share`'s contiguous slice [a, b) of a big generation of `n` prompt groups dealt
    over `count` nodes (trainer/plan/placement.py shares: the first n % count one more)."""
    sizes = shares(n, count)
    a = sum(sizes[:share])
    return a, a + sizes[share]


def _join_push(model: nn.Module) -> None:
    """On a rank without the engine: take part in rank 0's push (ZeRO-3 gathers each
    parameter from every rank's shard, a collective; a no-op for unpartitioned models)."""
    join_weight_gathers(model)


class Pipeline:
    """PipelineRL-k, free-running (`rollout.async_timing: wall`): a generator thread streams
    finished prompt groups while the trainer updates; weights are pushed in flight after every
    optimizer step and land between decode steps whenever they arrive; each step's batch is
    built from finished groups; staleness is bounded by k (GroupStream). The generator runs on
    rank 0, or with vLLM on every node's local rank 0 over that node's engines, each making
    its node's share of the step (trainer/generation/feeders.py; the loop joins the shares). Not
    reproducible run to run (which tokens see which weights, call sizes, and when the pool is
    drawn against the pass rates recorded depend on timing), and a resume restarts the stream:
    its in-flight groups were sampled by weights the checkpoint no longer holds."""

    def __init__(self, ctx: Context) -> None:
        c = ctx.config
        self.ctx = ctx
        # Rank 0 feeds the stream (with vLLM: every node's local rank 0, its node's share);
        # the loop joins the feeders' shares on every rank, so other ranks neither hold a
        # generator nor generate (next() returns None there).
        self.feeders = feeders(c)
        self.share = self.feeders.share
        # this node's dealt share of each step (placement.py shares: 5 or 4 of 48 on 10 nodes)
        per_step = self.feeders.groups or self.feeders.largest
        last = None if c.budget.steps is None else c.budget.steps - 1  # next(version) of it
        self.stream = GroupStream(c.off_policy.k, per_step, last)
        self.per_call = c.off_policy.groups_per_call or per_step  # as placement.rollout_rows
        self.width = c.off_policy.groups_per_call or self.feeders.largest  # every feeder's seeds
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.feeds = self.share is not None
        self.gen = make_generator(c, ctx.model, ctx.tokenizer, own_copy=True) if self.feeds else None
        if not self.feeds and c.rollout.backend == "vllm":
            # The vllm generator pushes the trainer's weights once at start-up (ZeRO-3: a
            # gather per parameter, collective): join it, else every later push is off by one.
            _join_push(ctx.model)
        self.thread = threading.Thread(target=self._produce, name="ablate-generator", daemon=True)
        if self.feeds:
            self.thread.start()

    @property
    def stale_dropped(self) -> int:
        return self.stream.stale_dropped

    @property
    def wait_seconds(self) -> float:
        return self.stream.wait_seconds

    def _produce(self) -> None:
        """Generate admitted groups in calls of up to `groups_per_call` prompts; every group
        enters the stream as soon as its call returns. A vLLM engine streams instead
        (_produce_stream)."""
        from trainer.generation.stream import stream_service

        G = self.ctx.config.rollout.generations_per_prompt
        self.service = stream_service(self.gen, self.ctx.config, self.ctx.tokenizer)
        if self.service is not None:
            return self._produce_stream(self.service)
        try:
            while not self.stop.is_set():
                n = self.stream.admit(self.per_call, self.stop)
                if n == 0:
                    break
                for group in split(sample(self.gen, self.ctx, n, self.share,
                                          self.feeders.count, self.width), n, G):
                    self.stream.put(group)
        except BaseException as e:  # surfaced in the trainer thread by next()
            self.error = e

    def _produce_stream(self, svc) -> None:
        """vLLM: every admitted prompt group is its own request on the engine's stream
        (trainer/generation/stream.py: no drain between groups, answer passes as thinking
        ends) and enters the GroupStream the moment it completes. Admission is unchanged
        (GroupStream.admit before submit), so the lag still binds at k."""
        from trainer.generation.service import Request

        c, ctx = self.ctx.config, self.ctx
        G = c.rollout.generations_per_prompt
        started: dict = {}
        svc.start()
        collector = threading.Thread(target=self._collect, args=(svc, started),
                                     name="ablate-groups", daemon=True)
        collector.start()
        try:
            while not self.stop.is_set() and self.error is None:
                n = self.stream.admit(self.per_call, self.stop)
                if n == 0:
                    break
                idx, seed = draw(ctx, n, self.share, self.feeders.count,
                                 self.width)  # sample()'s seeds
                for j, i in enumerate(idx):
                    started[(seed, j)] = time.perf_counter()
                    svc.submit(Request((seed, j, i), [ctx.prompts[i]], G, c.rollout.temperature,
                                       seed + j * G))
        except BaseException as e:  # surfaced in the trainer thread by next()
            self.error = e
        collector.join(timeout=60)

    def _collect(self, svc, started: dict) -> None:
        """Finished groups from the stream into the GroupStream, in the order they finish."""
        try:
            while not self.stop.is_set():
                for r in svc.results(timeout=0.2):
                    if r.error is not None:
                        self.error = r.error
                        return
                    seed, j, i = r.tag
                    self.stream.put(Batch([i], r.rollout,
                                          time.perf_counter() - started.pop((seed, j))))
        except BaseException as e:  # the service itself failed (an engine host that died)
            self.error = e

    def next(self, version: int) -> Batch | None:
        if not self.feeds:
            return None
        return self.stream.take(version, lambda: self.error)

    def after_step(self, model: nn.Module, version: int) -> None:
        if self.feeds:
            self.gen.sync_weights(model, version)
            self.stream.push(version)
        elif self.ctx.config.rollout.backend == "vllm":
            _join_push(model)  # under ZeRO-3 the feeders' pushes gather from all ranks' shards

    def hold_rollouts(self, on: bool) -> None:
        """Pause (True) or resume starting rollout groups on this node's engines, while an
        eval decodes on them (trainer/loop/final_eval.py); groups in flight finish."""
        if self.feeds:
            self.stream.hold(on)

    def stop_generating(self) -> None:
        """No rollout can be trained on any more: stop admitting groups and abort the ones in
        flight (their engines stay up for the last eval, trainer/loop/final_eval.py)."""
        if self.stop.is_set():
            return
        self.stop.set()
        if self.feeds:
            if getattr(self, "service", None) is not None:
                self.service.stop()  # its requests aborted; the engines stay
            self.thread.join(timeout=60)

    def close(self) -> None:
        self.stop_generating()
        if self.feeds:
            _close(self.gen)


def _close(gen: Generator) -> None:
    """Backends holding processes or devices (vllm) expose close(); hf needs nothing."""
    close = getattr(gen, "close", None)
    if callable(close):
        close()
