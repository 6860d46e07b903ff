"""Off-policy modes (`off_policy.mode`): where each optimizer step's batch comes from.

ppo_off_policy (PPO-off-policy-k): generate k steps' worth of prompts with the current weights,
then take k optimizer steps on its minibatches (k=1 is plain on-policy).
pipeline (PipelineRL-k, ScaleRL): a generator thread with its own copy of the model keeps
generating while the trainer updates; after every optimizer step the new weights are pushed and
applied between decode steps (mid-sequence), each token recording the version that sampled it;
the trainer refuses data more than k versions old and waits for fresher data instead.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from torch import nn

from trainer.config import TrainConfig
from trainer.length import Rollout, generate_rollout
from trainer.pool import PromptPool
from trainer.registry import Registry
from trainer.rollout import Generator, make_generator


@dataclass
class Batch:
    prompt_ids: list[int]  # pool index of each prompt (samples are prompt-major, G per prompt)
    rollout: Rollout
    gen_seconds: float
    # Tokens the generator ran for batches refused as too stale just before this one: their
    # generation was spent, so it counts in the generation FLOPs.
    dropped_gen_tokens: int = 0


@dataclass
class Context:
    config: TrainConfig
    model: nn.Module
    tokenizer: object
    pool: PromptPool
    prompts: list[list[int]]  # token ids of every training prompt
    gen_counter: int  # seeds of successive generate calls (checkpointed)


class Source(Protocol):
    def next(self, version: int) -> Batch: ...

    def after_step(self, model: nn.Module, version: int) -> None: ...

    def close(self) -> None: ...


MODES: Registry[Callable[[Context], Source]] = Registry("off_policy.mode")


def sample(gen: Generator, ctx: Context, n_prompts: int) -> Batch:
    """Draw prompts from the pool and generate G samples each (with length control)."""
    c = ctx.config
    idx = ctx.pool.next_batch(n_prompts)
    seed = c.seed * 1_000_003 + ctx.gen_counter
    ctx.gen_counter += 1
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


@MODES.register("ppo_off_policy")
class PPOOffPolicy:
    """One big generation (k x prompts_per_step prompts), then k optimizer steps on its parts."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gen = make_generator(ctx.config, ctx.model, ctx.tokenizer)
        self.buffer: list[Batch] = []

    def next(self, version: int) -> Batch:
        if not self.buffer:
            c = self.ctx.config
            self.gen.sync_weights(self.ctx.model, version)
            big = sample(self.gen, self.ctx, c.rollout.prompts_per_step * c.off_policy.k)
            self.buffer = split(big, c.off_policy.k, c.rollout.generations_per_prompt)
        return self.buffer.pop(0)

    def after_step(self, model: nn.Module, version: int) -> None:
        pass  # weights reach the generator only at the next big generation

    def close(self) -> None:
        _close(self.gen)


@MODES.register("pipeline")
class Pipeline:
    """Generation concurrent with training; in-flight weight pushes; max staleness k."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gen = make_generator(ctx.config, ctx.model, ctx.tokenizer, own_copy=True)
        self.queue: queue.Queue[Batch] = queue.Queue(maxsize=1)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.stale_dropped = 0
        self.wait_seconds = 0.0
        self.thread = threading.Thread(target=self._produce, name="ablate-generator", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        try:
            while not self.stop.is_set():
                b = sample(self.gen, self.ctx, self.ctx.config.rollout.prompts_per_step)
                while not self.stop.is_set():
                    try:
                        self.queue.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # surfaced in the trainer thread by next()
            self.error = e

    def next(self, version: int) -> Batch:
        k = self.ctx.config.off_policy.k
        t0, dropped = time.perf_counter(), 0
        while True:
            if self.error is not None:
                raise RuntimeError("generator thread failed") from self.error
            try:
                b = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            oldest = min((v[0] for v in b.rollout.versions if v), default=version)
            if version - oldest <= k:
                self.wait_seconds += time.perf_counter() - t0
                b.dropped_gen_tokens = dropped
                return b
            self.stale_dropped += 1  # trainer is > k steps ahead of this data: wait for newer
            dropped += sum(b.rollout.gen_tokens)

    def after_step(self, model: nn.Module, version: int) -> None:
        self.gen.sync_weights(model, version)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        _close(self.gen)


def _close(gen: Generator) -> None:
    """Backends holding processes or devices (vllm) expose close(); hf needs nothing."""
    close = getattr(gen, "close", None)
    if callable(close):
        close()
