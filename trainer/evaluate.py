"""The pass rate (mean@k) of a generator on a task's problems: sample, then score.

Training rewards, the held-out eval and the proxy warm-up's stopping rule all score through
trainer/tasks.py `score` and measure through `pass_rate`, so "pass rate" means the same thing
everywhere: a warm-up that stops at a measured pass rate lands where the run's first eval point
then measures it.
"""

from __future__ import annotations

from typing import Sequence

from trainer.config import TrainConfig
from trainer.algo.length import generate_rollout
from trainer.rollouts import Generator
from trainer.tasks import Problem, Task, score

# Held-out prompts per generate call when no row budget is given (eval.batch_size unset): the
# chunking every run used before eval.batch_size existed, so their results stay unchanged.
EVAL_CHUNK = 64


def prompts_per_call(batch_rows: int | None, k: int) -> int:
    """Prompts per generate call for a budget of `batch_rows` sampled rows (prompt x sample):
    whole prompts only (a prompt's k samples share one call), at least one. The rows bound the
    sampler's KV cache (rows x sequence length), which is what runs out of memory: the paper's
    eval is 1,000 prompts x 16 samples at ~14k tokens."""
    return EVAL_CHUNK if batch_rows is None else max(1, batch_rows // k)


def pass_rate(gen: Generator, task: Task, problems: Sequence[Problem],
              prompts: Sequence[list[int]], config: TrainConfig, tok, *, seed: int, k: int,
              temperature: float, batch_rows: int | None = None) -> float:
    """mean@k: the share of correct samples over k samples of every problem, drawn with the
    run's length control (what the policy would really answer), in generate calls of at most
    `batch_rows` rows (eval.batch_size). Every call uses the same seed: the batched sampler
    draws one random stream per call, so a different chunking draws different samples (the
    same pass rate in expectation; identical when sampling is near-greedy)."""
    correct = total = 0
    step = prompts_per_call(batch_rows, k)
    for a in range(0, len(prompts), step):
        ro = generate_rollout(gen, list(prompts[a:a + step]), config, tok, seed=seed,
                              n=k, temperature=temperature)
        verdicts = score(task, problems[a:a + step], tok, ro.tokens, k)
        correct += sum(verdicts)
        total += len(verdicts)
    return correct / max(total, 1)
