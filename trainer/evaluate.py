"""Decode-and-score: the one path from sampled tokens to verified answers.

Training rewards, the held-out eval (mean@k) and the proxy warm-up's stopping rule all go
through `score` and `pass_rate`, so "pass rate" means the same thing everywhere: a warm-up
that stops at a measured pass rate lands where the run's first eval point then measures it.
"""

from __future__ import annotations

from typing import Sequence

from trainer.config import TrainConfig
from trainer.length import generate_rollout
from trainer.rollout import Generator
from trainer.tasks import Problem, Task

# Held-out prompts per generate call: bounds the sampler's KV cache without slowing it much.
EVAL_CHUNK = 64


def decode(tok, completions: Sequence[Sequence[int]]) -> list[str]:
    """Completion ids -> answer text (EOS and other special tokens dropped)."""
    eos = tok.eos_token_id
    return tok.batch_decode([[t for t in c if t != eos] for c in completions],
                            skip_special_tokens=True)


def score(task: Task, problems: Sequence[Problem], tok, completions: Sequence[Sequence[int]],
          n: int) -> list[bool]:
    """Verdict of each completion; completions are prompt-major, `n` per problem."""
    return [task.score(problems[i // n], text)
            for i, text in enumerate(decode(tok, completions))]


def pass_rate(gen: Generator, task: Task, problems: Sequence[Problem],
              prompts: Sequence[list[int]], config: TrainConfig, tok, *, seed: int, k: int,
              temperature: float) -> float:
    """mean@k: the share of correct samples over k samples of every problem, drawn with the
    run's length control (what the policy would really answer)."""
    correct = total = 0
    for a in range(0, len(prompts), EVAL_CHUNK):
        ro = generate_rollout(gen, list(prompts[a:a + EVAL_CHUNK]), config, tok, seed=seed,
                              n=k, temperature=temperature)
        verdicts = score(task, problems[a:a + EVAL_CHUNK], tok, ro.tokens, k)
        correct += sum(verdicts)
        total += len(verdicts)
    return correct / max(total, 1)
