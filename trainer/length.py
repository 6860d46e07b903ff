"""Length control: how over-long generations are handled (`length.control`).

Each control is one function: (generator, prompts, config, tokenizer, seed) -> Rollout. They
wrap any Generator, so forced interruption and the overlong penalty work for every backend.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from trainer.config import TrainConfig
from trainer.registry import Registry
from trainer.rollout import Generator


@dataclass
class Rollout:
    """Samples of one generate call, prompt-major (prompt i's n samples at i*n .. i*n+n-1)."""

    prompts: list[list[int]]  # per sample
    tokens: list[list[int]]
    logprobs: list[list[float]]
    versions: list[list[int]]
    loss_mask: list[list[int]]  # 0 for tokens the policy did not sample (interruption text)
    finished: list[bool]
    interrupted: list[bool] = field(default_factory=list)
    penalty: list[float] = field(default_factory=list)  # added to the reward
    # Tokens the generator ran per sample (prompt prefill + every decoded token), for the
    # generation FLOPs: more than prompt + final tokens when interruption cuts thinking tokens
    # and re-prefills prompt + thinking + interruption text for the answer.
    gen_tokens: list[int] = field(default_factory=list)


CONTROLS: Registry[Callable[..., Rollout]] = Registry("length.control")


def _plain(gen: Generator, prompts, config: TrainConfig, seed: int, n: int, temperature: float,
           max_new: int | None = None) -> Rollout:
    r = config.rollout
    g = gen.generate(prompts, n=n, max_new_tokens=max_new or r.max_new_tokens,
                     temperature=temperature, top_p=r.top_p, seed=seed)
    rows = [p for p in prompts for _ in range(n)]
    B = len(g.tokens)
    return Rollout(prompts=rows, tokens=g.tokens,
                   logprobs=g.logprobs, versions=g.versions,
                   loss_mask=[[1] * len(t) for t in g.tokens], finished=list(g.finished),
                   interrupted=[False] * B, penalty=[0.0] * B,
                   gen_tokens=[len(p) + len(t) for p, t in zip(rows, g.tokens)])


@CONTROLS.register("none")
def none(gen, prompts, config, tokenizer, seed, *, n, temperature) -> Rollout:
    """Only the hard cap rollout.max_new_tokens."""
    return _plain(gen, prompts, config, seed, n, temperature)


@CONTROLS.register("overlong_penalty")
def overlong_penalty(gen, prompts, config, tokenizer, seed, *, n, temperature) -> Rollout:
    """DAPO soft penalty added to the reward: clip((L_max - |y|) / L_cache - 1, -1, 0)."""
    ro = _plain(gen, prompts, config, seed, n, temperature)
    L = config.length
    ro.penalty = [overlong(len(t), L.overlong_max, L.overlong_cache) for t in ro.tokens]
    return ro


def overlong(length: int, l_max: int, l_cache: int) -> float:
    return min(0.0, max(-1.0, (l_max - length) / l_cache - 1.0))


@CONTROLS.register("interrupt")
def interrupt(gen, prompts, config, tokenizer, seed, *, n, temperature) -> Rollout:
    """ScaleRL forced interruption: think up to a per-sample budget drawn in
    [budget_min_fraction * thinking_budget, thinking_budget]; samples still thinking get the
    interruption text appended (masked out of the loss: the policy did not sample it) and
    answer within `answer_budget` tokens."""
    L, cap = config.length, config.rollout.max_new_tokens
    think = min(L.thinking_budget, cap)
    ro = _plain(gen, prompts, config, seed, n, temperature, max_new=think)
    rng = random.Random(seed)
    lo = max(1, int(L.budget_min_fraction * think))
    text = tokenizer(L.interrupt_text, add_special_tokens=False).input_ids
    cont_idx, cont_prompts = [], []
    for i, toks in enumerate(ro.tokens):
        budget = rng.randint(lo, think)
        if ro.finished[i] and len(toks) <= budget:
            continue
        for field_ in (ro.tokens, ro.logprobs, ro.versions, ro.loss_mask):
            field_[i] = field_[i][:budget]
        ro.interrupted[i] = True
        ro.finished[i] = False
        cont_idx.append(i)
        cont_prompts.append(ro.prompts[i] + ro.tokens[i] + text)
    answer = L.answer_budget  # on top of the thinking tokens, as in the paper
    if cont_idx:
        ver = [v[-1] if v else 0 for v in ro.versions]
        g = gen.generate(cont_prompts, n=1, max_new_tokens=answer, temperature=temperature,
                         top_p=config.rollout.top_p, seed=seed + 1)
        for j, i in enumerate(cont_idx):
            ro.gen_tokens[i] += len(cont_prompts[j]) + len(g.tokens[j])
            ro.tokens[i] += text + g.tokens[j]
            ro.logprobs[i] += [0.0] * len(text) + g.logprobs[j]
            ro.versions[i] += [ver[i]] * len(text) + g.versions[j]
            ro.loss_mask[i] += [0] * len(text) + [1] * len(g.tokens[j])
            ro.finished[i] = g.finished[j]
    return ro


def generate_rollout(gen: Generator, prompts: list[list[int]], config: TrainConfig, tokenizer,
                     seed: int, *, n: int, temperature: float) -> Rollout:
    return CONTROLS.get(config.length.control)(gen, prompts, config, tokenizer, seed, n=n,
                                               temperature=temperature)
