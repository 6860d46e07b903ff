"""The run's state: exactly what its checkpoint saves besides the engine (weights, optimizer,
scheduler), so that a resume continues the run as if it had never stopped.

Why one dataclass: every part of a step reads or writes some of it (the update adds tokens and
FLOPs, the eval point takes the window's means, the checkpoint saves it all), and with the
state in one visible place a reader of trainer/loop/train.py sees what a step changes. The
parts get what they need as arguments; none keeps a copy.

(Named TrainState, not RunState: trainer/rundir.py RunState is a run's status, pending to done.)

On disk (checkpoint/state.pt) the layout is the one runs have always written: a plain dict
with the keys of `to_checkpoint` (counters with gen_counter, the window as "acc" sums with
"n/<key>" counts, lag_max_window), so a run checkpointed before this module existed resumes.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Optional

import torch

from trainer.algo.pool import DataPosition


@dataclass
class Counters:
    """The compute a run has spent: the curves' x axes (trainer/rundir.py COMPUTE_COLUMNS) and
    what the budget is spent against (trainer/loop/accounting.py)."""

    samples: int = 0  # sampled completions, every step's whole rollout
    tokens: int = 0  # prompt + completion tokens trained on (all ranks)
    flops_gen: float = 0.0  # 2N per generated token, discarded (stale) samples included
    flops_train: float = 0.0  # 6N per token position the forwards computed (all ranks)
    wall: float = 0.0  # seconds of the train loop (evals and checkpoints beside it excluded)
    zero_variance_dropped: int = 0  # prompt groups the zero-variance filter dropped

    @property
    def flops(self) -> float:
        return self.flops_gen + self.flops_train


@dataclass
class Window:
    """The step statistics since the last metrics row: a running sum and count per key (the row
    reports their means) and the largest off-policy lag seen (None: no lag measured)."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    lag_max: Optional[int] = None

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1

    def note_lag(self, lag: int) -> None:
        self.lag_max = max(self.lag_max or 0, lag)

    def means(self) -> dict[str, float]:
        return {k: v / self.counts[k] for k, v in self.sums.items()}

    def clear(self) -> None:
        self.sums, self.counts, self.lag_max = {}, {}, None


@dataclass
class TrainState:
    """Step, counters, the window of step statistics and the data position, live: the loop
    and its parts update them in place. The process's RNGs, the rollout source's own state and
    the evals launched but not written live elsewhere while the run goes on (torch and random,
    the source, the eval worker); `rng`, `source` and `pending_evals` hold them as the last
    save or resume saw them (trainer/loop/checkpoint.py fills them when it saves)."""

    data: DataPosition
    step: int = 0
    counters: Counters = field(default_factory=Counters)
    window: Window = field(default_factory=Window)
    rng: Optional[tuple[torch.Tensor, Any]] = None  # (torch.get_rng_state(), random.getstate())
    source: object = None  # the rollout source's state (trainer/generation/offpolicy.py)
    pending_evals: list[dict] = field(default_factory=list)  # see checkpoint.py

    def to_checkpoint(self) -> dict:
        """The dict state.pt holds (the on-disk layout: see the module doc)."""
        acc: dict[str, float] = {}
        for k, v in self.window.sums.items():
            acc[k], acc["n/" + k] = v, self.window.counts[k]
        torch_rng, py_rng = self.rng
        return {"step": self.step,
                "counters": {**asdict(self.counters), "gen_counter": self.data.gen_counter},
                "acc": acc, "pool": self.data.pool.state_dict(), "torch_rng": torch_rng,
                "py_rng": py_rng, "source": self.source, "lag_max_window": self.window.lag_max,
                "pending_evals": self.pending_evals}

    def restore(self, s: dict) -> None:
        """Take a checkpoint's state (every rank), the process's RNGs included."""
        counters = dict(s["counters"])
        self.data.gen_counter = counters.pop("gen_counter")
        self.step, self.counters = s["step"], Counters(**counters)
        acc = s["acc"]
        self.window = Window({k: v for k, v in acc.items() if not k.startswith("n/")},
                             {k[2:]: int(v) for k, v in acc.items() if k.startswith("n/")},
                             s.get("lag_max_window"))
        self.data.pool.load_state_dict(s["pool"])
        self.rng = (s["torch_rng"], s["py_rng"])
        torch.set_rng_state(s["torch_rng"])
        random.setstate(s["py_rng"])
        self.source = s.get("source")
        self.pending_evals = list(s.get("pending_evals", []))

    def mark(self, source_state: Callable[[], object]) -> "StepMark":
        """What a step changes before its optimizer step, to put back if the step is
        abandoned: the data position, RNGs, counters and window (the step's generation and
        rewards are counted before its update), and the rollout source's state (the step
        takes its batch out of the source: `source_state`, the state a checkpoint saves)."""
        w = self.window
        return StepMark(self.step, self.data.pool.state_dict(), self.data.gen_counter,
                        torch.get_rng_state(), random.getstate(), replace(self.counters),
                        Window(dict(w.sums), dict(w.counts), w.lag_max), source_state())

    def rewind(self, mark: "StepMark") -> None:
        """Back to `mark` (a stop signal inside the step): its checkpoint is the last finished
        step's, as if the abandoned step had never begun (the source's state to save with it
        is `mark.source`)."""
        self.data.pool.load_state_dict(mark.pool)
        self.data.gen_counter = mark.gen_counter
        torch.set_rng_state(mark.torch_rng)
        random.setstate(mark.py_rng)
        self.counters, self.window = replace(mark.counters), mark.window


@dataclass(frozen=True)
class StepMark:
    """The run's state at a step's start, and its source's (TrainState.mark)."""

    step: int
    pool: dict
    gen_counter: int
    torch_rng: torch.Tensor
    py_rng: Any
    counters: Counters
    window: Window
    source: object  # the rollout source's state then (Context.source_state)
