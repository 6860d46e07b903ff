"""Length control: how over-long generations are handled (`length.control`).

Each control is one function: (generator, prompts, config, tokenizer, seed) -> Rollout. They
wrap any Generator, so forced interruption and the overlong penalty work for every backend.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable

from trainer.registry import Registry
from trainer.rollouts import Generator, Rollout

if TYPE_CHECKING:  # types only: the config reads this registry for its names (config_parts/)
    from trainer.config import TrainConfig


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
    """ScaleRL forced interruption, keyed on whether thinking closed in time: each sample draws
    a thinking budget in [budget_min_fraction * thinking_budget, thinking_budget]. A sample
    whose `length.think_end` marker (`</think>`) ends within its budget is never interrupted;
    its answer may run `answer_budget` tokens past the marker. A sample still thinking at its
    budget is cut there and gets the interruption text (masked out of the loss: the policy did
    not sample it), then answers within `answer_budget` tokens. A sample that stopped (EOS)
    within its budget without the marker (a model that does not think) is left alone."""
    L, cap = config.length, config.rollout.max_new_tokens
    think = min(L.thinking_budget, cap)
    ro = _plain(gen, prompts, config, seed, n, temperature, max_new=think)
    rng = random.Random(seed)
    lo = max(1, int(L.budget_min_fraction * think))
    close = marker_ids(tokenizer, L.think_end)
    text = tokenizer(L.interrupt_text, add_special_tokens=False).input_ids
    todo: list[tuple[int, list[int], int]] = []  # (row, inserted text, answer tokens left)
    for i, toks in enumerate(ro.tokens):
        budget = rng.randint(lo, think)  # drawn for every sample: the stream stays seedable
        end = closed_at(toks, close, budget)
        if end is None:
            if ro.finished[i] and len(toks) <= budget:
                continue
            _cut(ro, i, budget)
            ro.interrupted[i] = True
            todo.append((i, text, L.answer_budget))
            continue
        limit = end + L.answer_budget  # the answer budget starts where thinking closed
        if len(toks) > limit:
            _cut(ro, i, limit)
        elif not ro.finished[i] and len(toks) < limit:  # the first pass's cap stopped it
            todo.append((i, [], limit - len(toks)))
    _answer(gen, ro, todo, config, temperature, seed + 1)
    return ro


def marker_ids(tokenizer, marker: str) -> list[int] | None:
    """Token ids of the end-of-thinking marker; None when the tokenizer cannot spell it (an
    unknown-token id would match whatever else maps to it)."""
    ids = tokenizer(marker, add_special_tokens=False).input_ids if marker else []
    unk = getattr(tokenizer, "unk_token_id", None)
    return ids if ids and (unk is None or unk not in ids) else None


def closed_at(tokens: list[int], marker: list[int] | None, budget: int) -> int | None:
    """Position just past the first end-of-thinking marker when it ends within the first
    `budget` tokens, else None (thinking still open at the budget)."""
    if not marker:
        return None
    m = len(marker)
    for j in range(0, min(len(tokens), budget) - m + 1):
        if tokens[j:j + m] == marker:
            return j + m
    return None


def _cut(ro: Rollout, i: int, length: int) -> None:
    """Keep sample i's first `length` tokens; it did not stop on its own."""
    for field_ in (ro.tokens, ro.logprobs, ro.versions, ro.loss_mask):
        field_[i] = field_[i][:length]
    ro.finished[i] = False


def _answer(gen: Generator, ro: Rollout, todo: list[tuple[int, list[int], int]],
            config: TrainConfig, temperature: float, seed: int) -> None:
    """Continue each listed sample after its inserted text (the interruption text, or nothing
    when only the first pass's cap stopped it), for at most its own number of tokens. One
    generate call at the largest allowance; each sample then keeps its own share."""
    if not todo:
        return
    conts = [ro.prompts[i] + ro.tokens[i] + text for i, text, _ in todo]
    g = gen.generate(conts, n=1, max_new_tokens=max(k for _, _, k in todo),
                     temperature=temperature, top_p=config.rollout.top_p, seed=seed)
    for j, (i, text, k) in enumerate(todo):
        ver = ro.versions[i][-1] if ro.versions[i] else 0
        toks = g.tokens[j][:k]
        ro.gen_tokens[i] += len(conts[j]) + len(g.tokens[j])  # what the generator ran
        ro.tokens[i] += text + toks
        ro.logprobs[i] += [0.0] * len(text) + g.logprobs[j][:k]
        ro.versions[i] += [ver] * len(text) + g.versions[j][:k]
        ro.loss_mask[i] += [0] * len(text) + [1] * len(toks)
        ro.finished[i] = g.finished[j] and len(g.tokens[j]) <= k


def generate_rollout(gen: Generator, prompts: list[list[int]], config: TrainConfig, tokenizer,
                     seed: int, *, n: int, temperature: float) -> Rollout:
    return CONTROLS.get(config.length.control)(gen, prompts, config, tokenizer, seed, n=n,
                                               temperature=temperature)
