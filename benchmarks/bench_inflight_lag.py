"""Share of trained tokens at each lag (step - version that sampled the token) in the
data-timed pipeline (trainer/generation/pipeline_data.py) on the proxy recipe, with in-flight switches
off (rollout.inflight_switch_tokens 0: weights change between calls only) and at the default
(None: max_new_tokens // (k + 1), at least 1). Drives the real source (generator thread, the
proxy model, real weight snapshots) with a stand-in optimizer step (a fixed weight nudge):
the versions depend only on the schedule and the sampled lengths, not on what is learned.

    PYTHONPATH=$PWD python benchmarks/bench_inflight_lag.py --steps 60
"""

from __future__ import annotations

import argparse
import copy
from collections import Counter
from pathlib import Path

import torch
from _proxy import proxy_tree

from trainer.config import TrainConfig
from trainer.policy import load_model
from trainer.generation.offpolicy import Context
from trainer.torch_axes import MODES
from trainer.algo.pool import DataPosition, PromptPool
from trainer.tasks import build_task


def lag_shares(switch: int | None, steps: int, warmed: bool = True) -> tuple[Counter, float]:
    d = proxy_tree(warmed)
    d.setdefault("rollout", {}).update(async_timing="data", inflight_switch_tokens=switch)
    c = TrainConfig.model_validate(d)
    model, tok = load_model(c)
    model = copy.deepcopy(model)
    task = build_task(c.task, c.eval.split)
    prompts = [tok(p.prompt).input_ids for p in task.train]
    pool = PromptPool([p.difficulty for p in task.train], c.data, c.seed)
    src = MODES.get("pipeline")(Context(c, model, tok, DataPosition(pool), prompts))
    lags: Counter = Counter()
    try:
        src.after_step(model, 0)
        for step in range(steps):
            b = src.next(step)
            for vs in b.rollout.versions:
                lags.update(step - v for v in vs)
            with torch.no_grad():
                next(model.parameters()).add_(1e-4)
            src.after_step(model, step + 1)
    finally:
        src.close()
    total = sum(lags.values())
    return lags, sum(k * n for k, n in lags.items()) / total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="3 steps on the unwarmed proxy: a smoke run (CI)")
    a = ap.parse_args()
    if a.quick:
        a.steps = 3
    torch.set_num_threads(1)
    for switch in (0, None):
        lags, mean = lag_shares(switch, a.steps, warmed=not a.quick)
        total = sum(lags.values())
        shares = "  ".join(f"{k}:{lags[k] / total:.3f}" for k in sorted(lags))
        print(f"inflight_switch_tokens={switch}: tokens {total}, lag_mean {mean:.2f}, "
              f"share by lag {shares}")


if __name__ == "__main__":
    main()
