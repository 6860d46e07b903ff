"""A sample's reward: the verifier's verdict on its answer (`reward.correct` /
`reward.incorrect`, ScaleRL's +1 / -1) plus the length control's penalty (trainer/algo/length.py:
the DAPO overlong penalty, 0 otherwise). No learned reward model, no KL term.

Why its own function: it is the one place a recipe's reward is defined, read apart from the
loop that calls it (trainer/loop/train.py) and the scorer that gives the verdicts
(trainer/tasks.py score, the same path as the held-out eval's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from trainer.rollouts import Rollout
from trainer.tasks import Problem, Task, score

if TYPE_CHECKING:  # types only: the config is above trainer/algo/ (it reads its registries)
    from trainer.config import RewardConfig


def rewards(verdicts: Sequence[bool], penalty: Sequence[float], cfg: RewardConfig) -> list[float]:
    """Each sample's reward from its verdict and its length penalty."""
    return [(cfg.correct if ok else cfg.incorrect) + pen for ok, pen in zip(verdicts, penalty)]


def score_and_reward(task: Task, problems: Sequence[Problem], tok, ro: Rollout, n: int,
                     cfg: RewardConfig) -> tuple[list[bool], list[float]]:
    """(verdict, reward) of every sample of a rollout; samples are prompt-major, `n` per
    problem."""
    verdicts = score(task, problems, tok, ro.tokens, n)
    return verdicts, rewards(verdicts, ro.penalty, cfg)
