"""Forced interruption is keyed on whether thinking closed within the drawn budget (issue 23
item 7), run through the real length control (trainer/algo/length.py `generate_rollout`).

The generator is scripted: a stand-in for the model that writes a fixed token stream per
prompt and, after the interruption text, a fixed answer. That lets the test place `</think>`
exactly (before, at, after the budget) while the code under test (budget draw, close
detection, cut, interruption text, answer budget, masks) is the real one.
"""

from __future__ import annotations

import random

import pytest
from _trainer_util import config, tiny

from trainer.algo.length import generate_rollout
from trainer.rollouts import Generation
from trainer.models.tokenizer import char_tokenizer

TOK = char_tokenizer()
EOS = TOK.eos_token_id
INTERRUPT = "Okay, time is up. </think>"
ANSWER = " 42"  # what the scripted model writes after an interruption (then EOS)


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False).input_ids


class ScriptedGenerator:
    """Writes script[prompt] (then EOS) for a prompt; for a continuation (prompt + what it
    wrote + anything inserted) it resumes the script where the written part ends, or writes
    ANSWER after an inserted interruption text. Records every call."""

    def __init__(self, scripts: dict[tuple[int, ...], list[int]]) -> None:
        self.scripts, self.calls = scripts, []

    def stream(self, prompt: list[int]) -> list[int]:
        for p, script in self.scripts.items():
            full = script + [EOS]
            if tuple(prompt[:len(p)]) != p:
                continue
            rest = prompt[len(p):]
            if rest == full[:len(rest)]:
                return full[len(rest):]
            if rest[-len(ids(INTERRUPT)):] == ids(INTERRUPT):
                return ids(ANSWER) + [EOS]
        raise AssertionError(f"unscripted prompt {TOK.decode(prompt)!r}")

    def generate(self, prompts, *, n, max_new_tokens, temperature, top_p, seed) -> Generation:
        self.calls.append(max_new_tokens)
        outs = [self.stream(p)[:max_new_tokens] for p in prompts for _ in range(n)]
        return Generation(tokens=outs, logprobs=[[-0.5] * len(t) for t in outs],
                          versions=[[3] * len(t) for t in outs],
                          finished=[bool(t) and t[-1] == EOS for t in outs])

    def sync_weights(self, model, version) -> None:
        pass


def cfg(thinking: int, answer: int, min_fraction: float = 1.0, cap: int = 400):
    return config(tiny(
        length={"control": "interrupt", "thinking_budget": thinking, "answer_budget": answer,
                "budget_min_fraction": min_fraction, "interrupt_text": INTERRUPT},
        rollout={"max_new_tokens": cap}))


def rollout(scripts: dict[str, str], c, seed: int = 5):
    prompts = [ids(p) for p in scripts]
    gen = ScriptedGenerator({tuple(ids(p)): ids(s) for p, s in scripts.items()})
    return generate_rollout(gen, prompts, c, TOK, seed, n=1, temperature=1.0), gen


def drawn_budgets(c, n: int, seed: int = 5) -> list[int]:
    """The per-sample budgets the control draws (its documented rule, same seed)."""
    think = min(c.length.thinking_budget, c.rollout.max_new_tokens)
    lo = max(1, int(c.length.budget_min_fraction * think))
    rng = random.Random(seed)
    return [rng.randint(lo, think) for _ in range(n)]


def test_closed_thinking_is_never_interrupted_even_when_the_answer_passes_the_budget():
    # Thinking closes at token 16 of a 20-token budget; the answer runs to ~35 tokens. The old
    # rule (total length > budget) cut it mid-answer and appended a second </think>.
    text = "a" * 8 + "</think>" + " the answer is 12345 and more"
    ro, _ = rollout({"1+1=": text}, cfg(thinking=20, answer=50))
    assert ro.interrupted == [False]
    assert TOK.decode(ro.tokens[0]).count("</think>") == 1
    assert ro.tokens[0] == ids(text) + [EOS] and ro.finished == [True]
    assert ro.loss_mask[0] == [1] * len(ro.tokens[0])


def test_answer_budget_counts_from_the_natural_close():
    # Closes at token 16; answer_budget 5 -> at most 16 + 5 tokens, not interrupted, truncated.
    text = "a" * 8 + "</think>" + "b" * 30
    ro, _ = rollout({"1+1=": text}, cfg(thinking=20, answer=5))
    assert ro.interrupted == [False] and ro.finished == [False]
    assert ro.tokens[0] == ids("a" * 8 + "</think>" + "b" * 5)


def test_answer_continues_past_the_first_pass_cap_after_a_late_close():
    # Closes at token 18 of a 20-token thinking pass: the first pass stops at 20 tokens, the
    # answer may go on to 18 + 10 = 28 tokens, so the control continues the sample for 8 more
    # (no text inserted) and the scripted model finishes at 18 + 6 + EOS = 25 tokens.
    text = "a" * 10 + "</think>" + "bbbbbb"
    ro, gen = rollout({"1+1=": text}, cfg(thinking=20, answer=10))
    assert ro.interrupted == [False] and ro.finished == [True]
    assert ro.tokens[0] == ids(text) + [EOS]
    assert ro.loss_mask[0] == [1] * len(ro.tokens[0])
    assert gen.calls == [20, 8]


def test_open_thinking_is_interrupted_once_at_its_drawn_budget():
    # Never closes within the budget (the marker comes at token 60 > budget <= 24).
    c = cfg(thinking=24, answer=4, min_fraction=0.5)
    scripts = {f"{k}+1=": "t" * (52 + k) + "</think>" + " 7" for k in range(6)}
    ro, _ = rollout(scripts, c)
    text, budgets = ids(INTERRUPT), drawn_budgets(c, len(scripts))
    assert len(set(budgets)) > 1  # the draw varies per sample
    for i, b in enumerate(budgets):
        toks, mask = ro.tokens[i], ro.loss_mask[i]
        assert ro.interrupted[i]
        assert toks[:b] == ids("t" * b)  # cut exactly at the drawn budget
        assert toks[b:b + len(text)] == text and mask[b:b + len(text)] == [0] * len(text)
        answer = toks[b + len(text):]
        assert 1 <= len(answer) <= c.length.answer_budget  # ANSWER+EOS is 4 tokens
        assert mask[b + len(text):] == [1] * len(answer)
        assert TOK.decode(toks).count("</think>") == 1  # exactly one: the inserted one


def test_marker_after_the_budget_counts_as_open():
    # </think> ends at token 16 but the budget is 12: thinking was still open at the budget.
    text = "a" * 8 + "</think>" + " 9"
    ro, _ = rollout({"1+1=": text}, cfg(thinking=12, answer=6))
    assert ro.interrupted == [True]
    assert ro.tokens[0][:12] == ids(text)[:12]
    assert ro.tokens[0][12:12 + len(ids(INTERRUPT))] == ids(INTERRUPT)


def test_a_sample_that_stops_without_thinking_inside_its_budget_is_left_alone():
    ro, gen = rollout({"1+1=": " 2"}, cfg(thinking=12, answer=6))
    assert ro.interrupted == [False] and ro.finished == [True]
    assert ro.tokens[0] == ids(" 2") + [EOS] and gen.calls == [12]


@pytest.mark.parametrize("thinking", [12, 30])
def test_mixed_batch(thinking):
    """Closed and open samples side by side: only the open ones get the text."""
    scripts = {"1+1=": "ab</think> 2", "2+2=": "x" * 40}
    ro, _ = rollout(scripts, cfg(thinking=thinking, answer=5))
    assert ro.interrupted == [False, True]
    assert TOK.decode(ro.tokens[0]) == "ab</think> 2</s>"
