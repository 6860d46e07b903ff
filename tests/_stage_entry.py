"""A job entry with a known curve, for testing adaptive studies and tune objectives.

`synthetic_run(config, run_dir)` stands in for the trainer where the test is about what the
orchestrator decides, not about training: it appends one evaluation point per step from the
last step written up to `config.budget.steps` (so it "resumes" like the trainer does), with a
ScaleRL sigmoid whose asymptote is set by the learning rate (A = lr * 2000, capped at 0.9) and a
little deterministic noise per (seed, step). From lr COLLAPSE_LR up the run is unstable: its
score falls from 0.5 to 0.03 (a curve no sigmoid fits), as an LR far too high does on the
real proxy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ablate.analysis.fit import sigmoid
from trainer.rundir import write_status

COST = 1e-3  # gpu_hours per step
COLLAPSE_LR = 1e-3


def truth_A(lr: float) -> float:
    return min(0.9, lr * 2000.0)


def synthetic_run(config, run_dir) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    f = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []
    start = rows[-1]["step"] if rows else 0
    A = truth_A(config.optim.lr)
    with open(f, "a") as out:
        for step in range(start + 1, config.budget.steps + 1):
            rng = np.random.default_rng([config.seed, step])
            c = step * COST
            y = (0.03 + 0.47 * np.exp(-step / 8) if config.optim.lr >= COLLAPSE_LR
                 else float(sigmoid(c, A, 1.5, 10 * COST, 0.1))) + rng.normal(0, 0.004)
            out.write(json.dumps({"step": step, "samples": step, "tokens": step, "flops": step,
                                  "gpu_hours": c, "eval/pass_rate": y}) + "\n")
    write_status(run_dir, "done", config.budget.steps, progress=1.0)  # as the trainer reports
