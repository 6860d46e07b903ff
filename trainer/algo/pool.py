"""The training prompt pool: epochs, pass-rate history, No-Positive-Resampling, curriculum.

Zero-variance filtering happens per batch in the loop (it needs the batch's rewards); the
pool holds what persists across batches: each prompt's historical pass rate, which prompts are
retired (NPR: pass rate >= threshold removes a prompt from later epochs), and the order of the
current epoch (shuffled, or easy -> hard). Thread-safe: in pipeline mode the generator thread
draws prompts while the trainer records results. Its whole state is checkpointed.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from trainer.registry import Registry

if TYPE_CHECKING:  # types only: the config reads this registry for its names (config_parts/)
    from trainer.config import DataConfig

# (pool, rng) -> order of the next epoch (indices of active prompts)
CURRICULA: Registry[Callable[["PromptPool", random.Random], list[int]]] = Registry("data.curriculum")


@CURRICULA.register("none")
def shuffled(pool: "PromptPool", rng: random.Random) -> list[int]:
    order = pool.active()
    rng.shuffle(order)
    return order


@CURRICULA.register("easy_to_hard")
def easy_to_hard(pool: "PromptPool", rng: random.Random) -> list[int]:
    """By the task's difficulty score, easiest first (ties in random order)."""
    order = shuffled(pool, rng)
    return sorted(order, key=lambda i: pool.difficulty[i])


@CURRICULA.register("pass_rate")
def by_pass_rate(pool: "PromptPool", rng: random.Random) -> list[int]:
    """Highest measured pass rate first; never-seen prompts count as 0.5 (unknown)."""
    order = shuffled(pool, rng)
    return sorted(order, key=lambda i: -pool.pass_rate(i, default=0.5))


class PromptPool:
    def __init__(self, difficulty: list[float], cfg: DataConfig, seed: int) -> None:
        self.difficulty = difficulty
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.correct = [0] * len(difficulty)
        self.seen = [0] * len(difficulty)
        self.retired: set[int] = set()
        self.order: list[int] = []
        self.pos = 0
        self.epoch = -1
        self.lock = threading.Lock()

    def active(self) -> list[int]:
        return [i for i in range(len(self.difficulty)) if i not in self.retired]

    def pass_rate(self, i: int, default: float = 0.0) -> float:
        return self.correct[i] / self.seen[i] if self.seen[i] else default

    def _new_epoch(self) -> None:
        if self.cfg.no_positive_resampling:
            self.retired |= {i for i in range(len(self.difficulty))
                             if self.seen[i] and self.pass_rate(i) >= self.cfg.npr_threshold}
        self.order = CURRICULA.get(self.cfg.curriculum)(self, self.rng)
        if not self.order:  # everything retired: nothing left to learn from; start over
            self.retired.clear()
            self.order = CURRICULA.get(self.cfg.curriculum)(self, self.rng)
        self.pos, self.epoch = 0, self.epoch + 1

    def next_batch(self, m: int) -> list[int]:
        with self.lock:
            out: list[int] = []
            while len(out) < m:
                if self.pos >= len(self.order):
                    self._new_epoch()
                out.append(self.order[self.pos])
                self.pos += 1
            return out

    def record(self, i: int, correct: int, total: int) -> None:
        with self.lock:
            self.correct[i] += correct
            self.seen[i] += total

    def state_dict(self) -> dict:
        with self.lock:
            return {"correct": list(self.correct), "seen": list(self.seen),
                    "retired": sorted(self.retired), "order": list(self.order), "pos": self.pos,
                    "epoch": self.epoch, "rng": self.rng.getstate()}

    def load_state_dict(self, s: dict) -> None:
        with self.lock:
            self.correct, self.seen = list(s["correct"]), list(s["seen"])
            self.retired, self.order = set(s["retired"]), list(s["order"])
            self.pos, self.epoch = s["pos"], s["epoch"]
            st = s["rng"]
            self.rng.setstate((st[0], tuple(st[1]), st[2]))


@dataclass
class DataPosition:
    """Where a run is in its data: the prompt pool (epoch, order, position, pass rates, retired
    prompts) and the number of generate calls drawn so far, which numbers their seeds. Part of
    the run's state (trainer/loop/state.py, checkpointed); the rollout sources draw from it
    (trainer/generation/offpolicy.py Context)."""

    pool: PromptPool
    gen_counter: int = 0

    def next_call_seed(self, run_seed: int) -> int:
        """The seed of the next generate call (its prompt j samples with seed + j x G)."""
        seed = run_seed * 1_000_003 + self.gen_counter
        self.gen_counter += 1
        return seed
