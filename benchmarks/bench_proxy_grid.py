"""Which proxy RL settings give a curve whose ceiling A can be pinned? Runs many single-thread
proxy runs side by side (one per core: a many-core box does in minutes what 2 cores need an
hour for), then fits each group (seeds pooled) with the default fitter and prints a table.

Each variant is recipes/proxy.yaml + COMMON + its own dotted overrides; all share one warmed
proxy (built first, once). `--set grid1` varies lr / batch / NPR / loss details with eval at
temperature 1; `--set grid2` the same ideas with near-greedy eval (temperature 0.1, 4 samples);
`--set grid3` writes answers least-significant digit first (task.reversed_answer).

    python benchmarks/bench_proxy_grid.py OUT --set grid2 --steps 1500      # run, then fit
    python benchmarks/bench_proxy_grid.py OUT --fit-only [--max-step 1000]  # fit what is there
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMON = {"optim.lr": 2e-4, "eval.every_steps": 50, "checkpoint.every_steps": 100000,
          "engine.threads": 1}
GREEDY = {"eval.temperature": 0.1, "eval.samples_per_prompt": 4}
# The pool sets of 2026-11-23 that ran before recipes/proxy.yaml scored all 256 pool problems
# (they scored the first 200, the old eval.num_prompts) and before it had a FLOPs budget.
PRE_POOL_RECIPE = {"eval.num_prompts": 200}
# The pool set-up, pinned here (recipes/proxy.yaml has it since): RL on the first 256
# training problems, eval of that pool near-greedily at log-spaced steps and every 50.
POOL = {**GREEDY, "task.rl_pool": 256, "eval.split": "train", "eval.every_steps": 50,
        "eval.per_decade": 8}
# The sets that compared variants around lr 1e-4 at equal compute (2.5e12 FLOPs).
EQUAL_LR1E4 = {**POOL, **PRE_POOL_RECIPE, "optim.lr": 1e-4, "budget.flops": 2.5e12}


def seeds(variants: dict[str, dict]) -> dict[str, dict]:
    """Each variant as two runs, `NAME_s0` and `NAME_s1` (RL seeds 0, 1), which fit_all pools."""
    return {f"{n}_s{i}": {**o, "seed": i} for n, o in variants.items() for i in range(2)}


SETS = {
    "grid1": {
        "lr2_s0": {}, "lr2_s1": {"seed": 1}, "lr1": {"optim.lr": 1e-4},
        "lr3": {"optim.lr": 3e-4}, "lr4": {"optim.lr": 4e-4},
        "lr2_b32": {"rollout.prompts_per_step": 32},
        "lr4_b32": {"optim.lr": 4e-4, "rollout.prompts_per_step": 32},
        "lr2_nonpr": {"data.no_positive_resampling": False},
        "lr3_nonpr": {"optim.lr": 3e-4, "data.no_positive_resampling": False},
        "lr2_g16": {"rollout.generations_per_prompt": 16},
        "lr2_ppo": {"loss.type": "ppo"}, "lr2_dapo": {"loss.type": "dapo"},
        "lr2_tok": {"loss.aggregation": "token"}, "lr2_k1": {"off_policy.k": 1},
        "lr2_advp": {"advantage.normalization": "prompt"},
    },
    "grid2": {k: {**GREEDY, **v} for k, v in {
        "t01_s0": {}, "t01_s1": {"seed": 1}, "t03": {"eval.temperature": 0.3},
        "t01lr4_s0": {"optim.lr": 4e-4}, "t01lr4_s1": {"optim.lr": 4e-4, "seed": 1},
        "t01lr3": {"optim.lr": 3e-4}, "t01lr1": {"optim.lr": 1e-4},
        "t01ppo": {"loss.type": "ppo"}, "t01dapo": {"loss.type": "dapo"},
        "t01tok": {"loss.aggregation": "token"}, "t01advp": {"advantage.normalization": "prompt"},
        "t01k1": {"off_policy.k": 1}, "t01b8": {"rollout.prompts_per_step": 8},
        "t01cap": {"task.unanswerable_fraction": 0.3}, "t01slow": {"optim.warmup_steps": 150},
    }.items()},
    # Answers written least-significant digit first (task.reversed_answer), eval at temperature
    # 1 (mean@16) and near-greedy; the recipe's own lr 1e-4 is not used here (COMMON: 2e-4).
    "grid3": {k: {"task.reversed_answer": True, **v} for k, v in {
        "rev_s0": {}, "rev_s1": {"seed": 1},
        "rev_t01_s0": GREEDY, "rev_t01_s1": {**GREEDY, "seed": 1},
    }.items()},
    # RL on a small pool, eval on that pool (eval.split: train), evals log-spaced.
    "pool": seeds({f"n{n}": {**POOL, **PRE_POOL_RECIPE, "budget.flops": None, "task.rl_pool": n,
                             "optim.lr": 1e-4} for n in (128, 256)}),
    # The quickstart's axis on that set-up.
    "qspool": seeds({f"p{b}": {**POOL, **PRE_POOL_RECIPE, "budget.flops": None,
                               "task.rl_pool": 128, "optim.lr": 2e-4,
                               "rollout.prompts_per_step": b} for b in (8, 16, 32)}),
    "qspool256": seeds({f"p{b}": {**POOL, **PRE_POOL_RECIPE, "budget.flops": None,
                                  "optim.lr": 1e-4, "rollout.prompts_per_step": b}
                        for b in (8, 16, 32)}),
    # Equal compute for every variant (the paper compares recipes at equal GPU-hours).
    "qsflops": seeds({f"p{b}": {**EQUAL_LR1E4, "rollout.prompts_per_step": b}
                      for b in (8, 16, 32)}),
    "calib": seeds({n: {**EQUAL_LR1E4, **o}
                    for n, o in {"cap": {"task.unanswerable_fraction": 0.3},
                                 "slow": {"optim.warmup_steps": 150},
                                 "lr5e5": {"optim.lr": 5e-5}}.items()}),
    # Loss details against the qsflops/calib base (16 prompts, CISPO, prompt aggregation).
    "details": seeds({n: {**EQUAL_LR1E4, **o}
                      for n, o in {"sample": {"loss.aggregation": "sample"},
                                   "token": {"loss.aggregation": "token"},
                                   "dapo": {"loss.type": "dapo"},
                                   "ppo": {"loss.type": "ppo"}}.items()}),
    # Axes that might move A on the pool: the paper's fp32 LM head under bf16, and samples per
    # prompt (a problem is learned only once some sample of it is right).
    "moveA": seeds({n: {**EQUAL_LR1E4, **o}
                    for n, o in {"bf16": {"precision.dtype": "bf16",
                                          "precision.generator_lm_head_fp32": False,
                                          "precision.trainer_lm_head_fp32": False},
                                 "bf16fp32head": {"precision.dtype": "bf16"},
                                 "g4": {"rollout.generations_per_prompt": 4},
                                 "g16": {"rollout.generations_per_prompt": 16}}.items()}),
    # At RL lr 5e-5 (the steadiest curves of the quickstart's lr axis): candidate axes.
    "lr5e5": seeds({n: {**POOL, "optim.lr": 5e-5, "budget.flops": 2.5e12, **o}
                    for n, o in {"p8": {"rollout.prompts_per_step": 8},
                                 "p32": {"rollout.prompts_per_step": 32},
                                 "sample": {"loss.aggregation": "sample"},
                                 "token": {"loss.aggregation": "token"}}.items()}),
    # Issue 10: recipe choices that might lower the ceiling on the recipe of recipes/proxy.yaml
    # (lr 5e-5, 2.5e12 FLOPs): an LR high enough to destabilize, colder sampling (less
    # exploration), 2 samples per prompt (most groups zero-variance), no filtering. One seed.
    "spreadA": {n: {**GREEDY, "optim.lr": 5e-5, **o}
                for n, o in {"base": {}, "lr5e4": {"optim.lr": 5e-4},
                             "lr2e3": {"optim.lr": 2e-3}, "temp05": {"rollout.temperature": 0.5},
                             "temp03": {"rollout.temperature": 0.3},
                             "g2": {"rollout.generations_per_prompt": 2},
                             "nofilter": {"data.zero_variance_filter": False,
                                          "data.no_positive_resampling": False},
                             "lr5e4_nofilter": {"optim.lr": 5e-4,
                                                "data.zero_variance_filter": False,
                                                "data.no_positive_resampling": False}}.items()},
    # ScaleRL: "PipelineRL-k and PPO-off-policy-k reach similar A; PipelineRL has higher B".
    # The recipe (pipeline, k=8) is the base; this is the other mode at the same k.
    "offpol": seeds({"ppo_off": {**GREEDY, "optim.lr": 5e-5, "off_policy.mode": "ppo_off_policy"}}),
}

# --quick: the proxy without its warm-up (~3 min on one core the first time a cache builds it)
# and 16 eval prompts, not 256 (steps 1, 2 and 3 are each evaluated): that the harness runs.
QUICK = {"model.proxy.warmup_target": None, "eval.num_prompts": 16}

# One run in its own process with one thread, like a sweep job on a 1-core slot.
ONE = ("import sys, torch; torch.set_num_threads(1); import yaml, trainer; from pathlib import Path;"
       "from trainer.config import TrainConfig;"
       "trainer.run(TrainConfig.model_validate(yaml.safe_load(open(sys.argv[1]))), Path(sys.argv[2]))")


def config_for(overrides: dict) -> dict:
    from ablate.adapters.builtin.provenance import set_path

    cfg = yaml.safe_load((ROOT / "recipes" / "proxy.yaml").read_text())
    for path, value in overrides.items():
        cfg = set_path(cfg, tuple(path.split(".")), value)
    return cfg


def run_all(out: Path, variants: dict, steps: int) -> None:
    from trainer.config import TrainConfig
    from trainer.policy import proxy_path

    t0 = time.time()
    cfgs = {n: config_for({**COMMON, "budget.steps": steps, **o}) for n, o in variants.items()}
    for c in cfgs.values():
        TrainConfig.model_validate(c)  # every variant is valid before anything trains
    proxy_path(TrainConfig.model_validate(next(iter(cfgs.values()))))
    print(f"proxy ready in {time.time() - t0:.0f} s", flush=True)
    procs = []
    for name, cfg in cfgs.items():
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "in.yaml").write_text(yaml.safe_dump(cfg))
        with open(d / "log", "w") as log:  # the child holds its own copy of the handle
            procs.append((name, subprocess.Popen(
                [sys.executable, "-c", ONE, str(d / "in.yaml"), str(d / "run")],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})))
    for name, p in procs:
        p.wait()
        print(f"{name}: exit {p.returncode} at {time.time() - t0:.0f} s", flush=True)


def fit_all(out: Path, max_step: int | None) -> list[dict]:
    """Seeds (`_s0`, `_s1` suffixes) of one name are pooled, as compare pools a variant's seeds."""
    import numpy as np

    from ablate.analysis.fit import FitError
    from ablate.analysis.fitters import fit_sigmoid

    groups: dict[str, list[list[tuple[float, float]]]] = {}
    for m in sorted(out.glob("*/run/metrics.jsonl")):
        name = m.parts[-3]
        group = name.rsplit("_s", 1)[0] if name[-3:] in ("_s0", "_s1") else name
        rows = [json.loads(line) for line in m.read_text().splitlines() if line.strip()]
        groups.setdefault(group, []).append(
            [(r["flops"], r["eval/pass_rate"]) for r in rows
             if "eval/pass_rate" in r and (max_step is None or r["step"] <= max_step)])
    table = []
    for group, curves in groups.items():
        x = np.concatenate([[c for c, _ in s] for s in curves])
        y = np.concatenate([[v for _, v in s] for s in curves])
        sid = np.concatenate([[i] * len(s) for i, s in enumerate(curves)])
        tail = float(np.mean([np.mean([v for _, v in s[-5:]]) for s in curves]))
        row = {"variant": group, "seeds": len(curves), "points": len(y), "last5_mean": tail}
        try:
            f = fit_sigmoid(x, y, seeds=sid)
            row.update(A=f.A, A_lo=f.ci["A"][0], A_hi=f.ci["A"][1], B=f.B, r2=f.r2)
        except FitError as e:
            row["fit"] = str(e).split(":")[0]
        table.append(row)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--set", choices=sorted(SETS), default="grid2")
    ap.add_argument("--only", help="comma-separated variant names of the set")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--fit-only", action="store_true")
    ap.add_argument("--max-step", type=int, help="fit only points up to this step")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the set's first variant for 3 steps "
                    "on the unwarmed proxy, a small eval, JSON out: a smoke run (CI)")
    a = ap.parse_args()
    variants = SETS[a.set]
    if a.quick:
        a.only, a.steps, a.json = next(iter(variants)), 3, True
    if a.only:
        variants = {k: variants[k] for k in a.only.split(",")}
    if a.quick:
        variants = {k: {**v, **QUICK} for k, v in variants.items()}
    if not a.fit_only:
        run_all(a.out, variants, a.steps)
    table = fit_all(a.out, a.max_step)
    if a.json:
        print(json.dumps(table, indent=1))
        return
    print("| variant | seeds | mean of last 5 evals | A [95%] | B | R^2 |\n|---|---|---|---|---|---|")
    for r in table:
        fit = (f"{r['A']:.3f} [{r['A_lo']:.3f}, {r['A_hi']:.3f}] | {r['B']:.2f} | {r['r2']:.3f}"
               if "A" in r else f"fit refused: {r['fit']} | | ")
        print(f"| {r['variant']} | {r['seeds']} | {r['last5_mean']:.3f} | {fit} |")


if __name__ == "__main__":
    main()
