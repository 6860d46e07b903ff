"""The time plan (trainer/plan/time_plan.py) against the CPU proxy's measured step times.

Runs real trainer runs (trainer.run, the warmed proxy from ABLATE_CACHE) of a few configs for
a few steps each, one subprocess per run, and reads each run's train-loop wall per step
(metrics `time/wall_s` at the last eval / steps: eval and checkpoints excluded, as the plan's
step_s) and its generation seconds per step (`time/generation_s`, the window's mean).

`--calibrate` fits the plan's CPU constants (CPU_DECODE_ITER_S, CPU_DECODE_FLOPS,
CPU_TRAIN_FLOPS, CPU_STEP_OVERHEAD_S) on two ppo_off_policy runs (generation and training take
turns there, so each is measured alone) by least squares, and prints them; the check runs
configs not used to fit (pipeline mode, other batch shapes) and prints plan vs measured.

    python benchmarks/bench_time_plan.py                 # check (the plan's constants as set)
    python benchmarks/bench_time_plan.py --calibrate     # fit the constants, then check
    python benchmarks/bench_time_plan.py --json          # one object per run
    python benchmarks/bench_time_plan.py --quick         # one 3-step check run, unwarmed: a smoke run (CI)

Timings depend on the machine's load: say "loaded" when reporting them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _proxy import proxy_tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = 40
WARMED = True  # --quick: the proxy without its warm-up (~3 min on one core the first time a
# cache builds it): the smoke run checks that the harness runs, and a step costs the same
# (name, overrides on recipes/proxy.yaml). ppo_off_policy k=1: generation then training.
FIT = [("fit: ppo k=1, 8 prompts x 8", {"off_policy": {"mode": "ppo_off_policy", "k": 1},
                                       "rollout": {"prompts_per_step": 8}}),
       ("fit: ppo k=1, 32 prompts x 8", {"off_policy": {"mode": "ppo_off_policy", "k": 1},
                                        "rollout": {"prompts_per_step": 32}})]
CHECK = [("proxy.yaml (pipeline, 16 x 8)", {}),
         ("pipeline, 32 prompts x 16", {"rollout": {"prompts_per_step": 32,
                                                    "generations_per_prompt": 16}}),
         ("ppo k=1, 16 prompts x 16", {"off_policy": {"mode": "ppo_off_policy", "k": 1},
                                       "rollout": {"generations_per_prompt": 16}}),
         ("ppo k=1, 64 prompts x 8, 12 new tokens", {
             "off_policy": {"mode": "ppo_off_policy", "k": 1},
             "rollout": {"prompts_per_step": 64, "max_new_tokens": 12}})]

ONE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from trainer.config import TrainConfig
import trainer
cfg = TrainConfig.model_validate(json.loads({tree!r}))
t0 = time.perf_counter()
trainer.run(cfg, Path({run_dir!r}))
total = time.perf_counter() - t0
rows = [json.loads(l) for l in open(Path({run_dir!r}) / "metrics.jsonl")]
last = rows[-1]
print(json.dumps({{"steps": last["step"], "wall_s": last["time/wall_s"],
                  "generation_s": last.get("time/generation_s"), "total_s": total}}))
"""


def quickstart_tree() -> dict:
    """The quickstart study's first variant, to its own budget (FLOPs) and evals."""
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    v = expand(load_study(ROOT / "recipes" / "quickstart.yaml"))[0]
    return v.config.model_dump(mode="json")


def end_to_end() -> dict:
    """A whole quickstart run: steps reached, train-loop wall and total time vs the plan."""
    from trainer.config import TrainConfig
    from trainer.plan.time_plan import plan_time
    from trainer.validate import JobShape

    tree = quickstart_tree()
    m = run_tree(tree)
    p = plan_time(TrainConfig.model_validate(tree), JobShape())
    return {"run": "quickstart.yaml variant 0, to its FLOPs budget", **m,
            "plan_steps": p.steps, "plan_loop_s": p.steps * p.step_s,
            "plan_total_s": p.wall_h * 3600, "plan_evals": p.evals, "plan_eval_s": p.eval_s}


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def config_tree(over: dict) -> dict:
    tree = merge(proxy_tree(WARMED), over)
    tree["budget"] = {"steps": STEPS}
    tree["eval"] = {**tree["eval"], "every_steps": 10_000, "per_decade": None}
    tree["checkpoint"] = {"every_steps": 10_000}
    return tree


def measure(over: dict) -> dict:
    """One real run: train-loop wall per step and generation seconds per step."""
    return run_tree(config_tree(over))


def run_tree(tree: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        code = ONE.format(root=str(ROOT), tree=json.dumps(tree), run_dir=str(Path(tmp) / "run"))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        m = json.loads(r.stdout.strip().splitlines()[-1])
    return {"step_s": m["wall_s"] / m["steps"], "generation_s": m["generation_s"],
            "total_s": m["total_s"], "steps": m["steps"], "loop_s": m["wall_s"]}


def planned(over: dict):
    from trainer.config import TrainConfig
    from trainer.plan.time_plan import plan_time
    from trainer.validate import JobShape

    return plan_time(TrainConfig.model_validate(config_tree(over)), JobShape())


def calibrate(fits: list[tuple[dict, dict]]) -> dict:
    """Least squares for the CPU constants from ppo_off_policy runs: generation seconds per
    step = iters x ITER_S + gen FLOPs / DECODE_FLOPS; train seconds = FLOPs / TRAIN_FLOPS +
    OVERHEAD (train = wall - generation: they take turns in that mode)."""
    import numpy as np

    from trainer.config import TrainConfig
    from trainer.plan.model_shape import proxy_shape
    from trainer.plan.time_model import sample_counts, train_flops

    g_rows, g_y, t_rows, t_y = [], [], [], []
    for over, m in fits:
        c = TrainConfig.model_validate(config_tree(over))
        sh = proxy_shape(c)
        samples, prompt, completion = sample_counts(c)
        iters = completion + 1
        g_rows.append([iters, samples * (prompt + completion) * 2.0 * sh.params])
        g_y.append(m["generation_s"])
        tokens = samples * (prompt + completion)
        t_rows.append([train_flops(c, sh, tokens, prompt + completion / 2), 1.0])
        t_y.append(m["step_s"] - m["generation_s"])
    (it, inv_g), *_ = np.linalg.lstsq(np.array(g_rows), np.array(g_y), rcond=None)
    (inv_t, over_s), *_ = np.linalg.lstsq(np.array(t_rows), np.array(t_y), rcond=None)
    return {"CPU_DECODE_ITER_S": float(it), "CPU_DECODE_FLOPS": float(1 / inv_g),
            "CPU_TRAIN_FLOPS": float(1 / inv_t), "CPU_STEP_OVERHEAD_S": float(over_s)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one 3-step check run on the unwarmed "
                    "proxy, no whole run, JSON out: a smoke run (CI)")
    args = ap.parse_args()
    out = []
    checks = CHECK
    if args.quick:
        global STEPS, WARMED
        STEPS, WARMED, checks, args.calibrate, args.json = 3, False, CHECK[:1], False, True
    if args.calibrate:
        fits = []
        for name, over in FIT:
            m = measure(over)
            fits.append((over, m))
            out.append({"run": name, "used_to_fit": True, **m})
        consts = calibrate(fits)
        import trainer.plan.time_model as tm  # where the constants live

        for k, v in consts.items():
            setattr(tm, k, v)
        print("# fitted:", json.dumps(consts), file=sys.stderr)
    for name, over in checks:
        m = measure(over)
        p = planned(over)
        out.append({"run": name, "used_to_fit": False, **m, "plan_step_s": p.step_s,
                    "plan_generation_s": p.generation_s, "plan_train_s": p.train_s,
                    "ratio": p.step_s / m["step_s"]})
    e2e = None if args.quick else end_to_end()
    if args.json:
        print(json.dumps(out + ([e2e] if e2e else [])))
        return
    print("| run | measured s/step (gen) | planned s/step (gen, train) | plan / measured |")
    print("|---|---|---|---|")
    for r in out:
        if r["used_to_fit"]:
            print(f"| {r['run']} (used to fit) | {r['step_s']:.3f} ({r['generation_s']:.3f}) | | |")
        else:
            print(f"| {r['run']} | {r['step_s']:.3f} ({r['generation_s']:.3f}) | "
                  f"{r['plan_step_s']:.3f} ({r['plan_generation_s']:.3f}, {r['plan_train_s']:.3f}) "
                  f"| {r['ratio']:.2f} |")
    print(f"\n{e2e['run']}: steps {e2e['steps']} (planned {e2e['plan_steps']}), train-loop "
          f"{e2e['loop_s']:.0f} s (planned {e2e['plan_loop_s']:.0f}), whole run "
          f"{e2e['total_s']:.0f} s (planned {e2e['plan_total_s']:.0f}, incl. "
          f"{e2e['plan_evals']} evals of {e2e['plan_eval_s']:.1f} s)")


if __name__ == "__main__":
    main()
