"""Eval through the job's generation service (rollout.backend: vllm).

Why: the held-out eval is the curve's y value and, at the paper's scale (1,000 prompts x 16
samples at ~14k tokens), the largest single generation of a run. Decoding it with the HF sampler
on the training ranks needs a KV cache the training GPUs do not have room for and, under ZeRO-3,
every rank decoding in lockstep with a parameter all-gather per token. The vLLM engine the
rollouts use is made for it: paged KV cache, continuous batching (in pipeline mode the eval's
requests batch with the running rollouts'), and the same fp32 LM head as the rollouts.

How: rank 0 holds the engine (the rollout source's generator). Before eval it gets the trainer's
current weights if it holds older ones (ppo_off_policy pushes only at its next big generation;
pipeline mode pushes every step, so there nothing is sent); under ZeRO-3 that push gathers
each parameter from every rank's shard, so every rank takes part in the decision and the
gathers. Then rank 0 alone evaluates, in one generate call (the engine schedules its own
memory: eval.batch_size bounds the HF sampler's KV cache and does not apply here), while the
other ranks go on to the checkpoint's barrier. The hf backend keeps its own path (loop.py).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from trainer.config import TrainConfig
from trainer.distributed import broadcast_object, rank
from trainer.evaluate import pass_rate
from trainer.rollout import Generator
from trainer.tasks import Problem, Task


def uses_service(config: TrainConfig, source) -> bool:
    """Does eval go through the generation service? The same answer on every rank (config
    and whether the loop passed its rollout source), so all ranks take the same path."""
    return config.rollout.backend != "hf" and source is not None


def service_generator(source) -> Optional[Generator]:
    """The rollout source's generator on this rank (PPOOffPolicy / Pipeline `.gen`); None on
    ranks that hold none (pipeline mode: only rank 0 feeds)."""
    return getattr(source, "gen", None)


def bring_up_to_date(gen: Optional[Generator], model: torch.nn.Module, version: int,
                     zero3: bool) -> bool:
    """Push the trainer's weights (`version`) into the engine if it holds older ones; True
    when a push happened. Every rank calls it: rank 0's view decides (a broadcast), ranks
    holding a generator push, the others join the ZeRO-3 gathers of the push."""
    stale = bool(broadcast_object(gen is not None and getattr(gen, "version", version) < version))
    if not stale:
        return False
    if gen is not None:
        gen.sync_weights(model, version)
    elif zero3:
        from trainer.weight_push import join_weight_gathers

        join_weight_gathers(model)
    return True


def service_pass_rate(gen: Generator, task: Task, problems: Sequence[Problem],
                      prompts: Sequence[list[int]], config: TrainConfig, tok, *,
                      seed: int) -> float:
    """mean@k of the held-out set through the engine, all prompts in one call (rank 0)."""
    k = config.eval.samples_per_prompt
    return pass_rate(gen, task, problems, prompts, config, tok, seed=seed, k=k,
                     temperature=config.eval.temperature, batch_rows=max(1, len(prompts)) * k)


def eval_pass_rate(source, model: torch.nn.Module, step: int, zero3: bool, task: Task,
                   problems: Sequence[Problem], prompts: Sequence[list[int]],
                   config: TrainConfig, tok, *, seed: int) -> Optional[float]:
    """The loop's eval on the service (every rank calls it): the engine brought up to the
    trainer's weights at `step`, then mean@k on rank 0; None on the other ranks, which go on
    to the checkpoint's barrier meanwhile."""
    gen = service_generator(source)
    bring_up_to_date(gen, model, step, zero3)
    if rank() != 0:
        return None
    if gen is None:  # the sources give rank 0 a generator: a new one that does not is a bug
        raise RuntimeError(f"eval through the generation service: the {type(source).__name__} "
                           "source holds no generator on rank 0")
    return service_pass_rate(gen, task, problems, prompts, config, tok, seed=seed)
