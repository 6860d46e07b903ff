"""Does the warmed CPU proxy start where its recipe says, on any data seed and thread count?

For each task data seed x torch thread count, build the proxy from nothing (a fresh cache dir,
one process each) and measure the starting pass rate as the target is defined: held-out
mean@16 at temperature 1 (trainer.evaluate.pass_rate, the run's eval seed). The recipe's own
eval scores its RL pool near-greedily since the proxy moved to eval on the pool.
Prints a markdown table for benchmarks/RESULTS.md and, with --json, one object per build.

    python benchmarks/bench_proxy_warmup.py                    # 5 seeds x threads 1, 2
    python benchmarks/bench_proxy_warmup.py --seeds 1234 --threads 1 --parallel 1
    python benchmarks/bench_proxy_warmup.py --smoke --json   # one build of a mini proxy (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE = r"""
import json, sys, time
import torch
sys.path.insert(0, {root!r})
import yaml
from trainer.config import TrainConfig
from trainer.evaluate import pass_rate
from trainer.policy import load_model
from trainer.generation.rollout import HFGenerator
from trainer.tasks import build_task

torch.set_num_threads({threads})
torch.set_flush_denormal(True)
d = yaml.safe_load(open({recipe!r}))
def merge(a, b):
    for k, v in b.items():
        a[k] = merge(a.get(k) or {{}}, v) if isinstance(v, dict) else v
    return a
merge(d, json.loads({override!r}))
d.setdefault("task", {{}})["data_seed"] = {seed}
c = TrainConfig.model_validate(d)
t0 = time.perf_counter()
model, tok = load_model(c)
build_s = time.perf_counter() - t0
task = build_task(c.task)
# Held-out mean@16 at temperature 1, the quantity the target is set in, with the run's eval
# seed (a proxy run's own eval now scores its RL pool near-greedily: another quantity).
problems = task.eval[: c.task.num_eval_prompts]
prompts = [tok(p.prompt, add_special_tokens=False).input_ids for p in problems]
start = pass_rate(HFGenerator(c, model, tok), task, problems, prompts, c, tok,
                  seed=c.seed * 7919 + 17, k=16, temperature=1.0)
log = model.config.ablate_warmup  # written by the build into the cached config.json
print(json.dumps({{"seed": {seed}, "threads": {threads}, "target": log["target"],
                  "warmup_steps": log["steps"], "warmup_checks": len(log["checks"]),
                  "warmup_rate": log["pass_rate"], "start_rate": start, "build_s": build_s}}))
"""


# --smoke: the recipe's model and task shrunk to a 1-layer, 32-wide proxy on 1-digit addition,
# which warms up in seconds (tests/test_axes.py's MINI): that the harness runs, no figure.
SMOKE = {"model": {"proxy": {"hidden_size": 32, "num_layers": 1, "num_heads": 2,
                             "intermediate_size": 64, "max_position_embeddings": 16,
                             "warmup_target": 0.2, "warmup_band": 0.15, "warmup_eval_prompts": 20,
                             "warmup_lr": 1e-2, "warmup_batch_size": 32}},
         "task": {"digits": 1, "num_train_prompts": 60, "num_eval_prompts": 8, "rl_pool": None},
         "rollout": {"max_new_tokens": 3}}


def build_one(seed: int, threads: int, recipe: Path, override: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="ablate-bench-warmup-") as cache:
        env = dict(os.environ, ABLATE_CACHE=cache, OMP_NUM_THREADS=str(threads),
                   HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        code = ONE.format(root=str(ROOT), threads=threads, seed=seed, recipe=str(recipe),
                          override=json.dumps(override or {}))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            row = {"seed": seed, "threads": threads, "error": r.stderr.strip().splitlines()[-1]}
        else:
            row = json.loads(r.stdout.strip().splitlines()[-1])
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress: one line per build
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "proxy.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1234, 1, 2, 3, 4])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--parallel", type=int, default=1, help="builds at once")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="one build (seed 1234, 1 thread) of a mini proxy, in seconds (CI)")
    a = ap.parse_args()
    if a.smoke:
        a.seeds, a.threads = [1234], [1]
    jobs = [(s, t) for s in a.seeds for t in a.threads]
    with ThreadPoolExecutor(a.parallel) as ex:
        rows = list(ex.map(lambda j: build_one(j[0], j[1], a.recipe, SMOKE if a.smoke else None),
                           jobs))
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| data seed | threads | warm-up steps | checks | warm-up pass rate | start pass rate "
          "(run's eval) | off target | build s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['seed']} | {r['threads']} | error: {r['error']} |")
            continue
        off = r["start_rate"] - r["target"]
        print(f"| {r['seed']} | {r['threads']} | {r['warmup_steps']} | {r['warmup_checks']} | "
              f"{r['warmup_rate']:.3f} | {r['start_rate']:.3f} | {off:+.3f} | {r['build_s']:.0f} |")
    ok = [r for r in rows if "error" not in r]
    worst = max((abs(r["start_rate"] - r["target"]) for r in ok), default=float("nan"))
    print(f"\n{len(ok)}/{len(rows)} builds; worst |start - target| = {worst:.3f}")


if __name__ == "__main__":
    main()
