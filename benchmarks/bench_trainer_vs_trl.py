"""Samples/s of ablate's trainer vs TRL's GRPOTrainer on the same model, task and batch.

Same warmed proxy (recipes/proxy.yaml's char Llama), "NN+NN=" prompts, 16 prompts x 8
completions per optimizer step, 4 new tokens max, on-policy, no KL, constant LR, fp32, CPU.
TRL is set up to be fair on a CPU (use_cpu, bf16=False, no gradient checkpointing: its
defaults turn bf16 and checkpointing on, and checkpointing alone costs ~28%;
per_device_train_batch_size=128 => one generation round per step). Each
program runs in its own process, alternating. Both are timed the same way: wall time between
consecutive optimizer-step ends (everything a step does: generation, reward, update, weight
push, bookkeeping), first step left out, median over steps, then median over repeats; neither
evaluates nor checkpoints between timed steps.

    python benchmarks/bench_trainer_vs_trl.py --steps 30 --repeats 3 [--threads 1]
    python benchmarks/bench_trainer_vs_trl.py --quick   # 4 steps, 1 repeat, unwarmed: a smoke run (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _proxy import proxy_tree

REPO = Path(__file__).resolve().parents[1]
PROMPTS, G, NEW = 16, 8, 4
# --quick: a smoke run on the proxy without its warm-up (benchmarks/_proxy.py says why).
UNWARMED = "--quick" in sys.argv


def base_config(steps: int, mode: str):
    from trainer.config import TrainConfig

    d = proxy_tree(warmed=not UNWARMED)
    d["rollout"].update(prompts_per_step=PROMPTS, generations_per_prompt=G, max_new_tokens=NEW)
    d["off_policy"] = {"mode": mode, "k": 1 if mode == "ppo_off_policy" else 8}
    d["data"].update(zero_variance_filter=False, no_positive_resampling=False)  # like TRL
    d["optim"].update(warmup_steps=0)
    # Neither program evaluates or checkpoints between the timed steps: eval runs at step 0
    # and after the last step only, outside the step-end clock.
    d["eval"] = {"every_steps": steps, "num_prompts": 1, "samples_per_prompt": 1}
    d["budget"] = {"steps": steps}
    d["checkpoint"] = {"every_steps": 10_000}
    return TrainConfig.model_validate(d)


def run_ablate(steps: int, mode: str) -> float:
    import trainer
    from trainer.loop import train as loop

    cfg = base_config(steps, mode)
    times: list[float] = []
    status = loop.write_status

    def clock(run, state: str, phase: str | None = None) -> None:
        # Every finished step marks "running" with phase "generation" at its boundary
        # (trainer/loop/train.py train(); "update" marks the middle of a step).
        status(run, state, phase)
        if state == "running" and phase == "generation" and run.state.step > 0:
            times.append(time.perf_counter())

    loop.write_status = clock
    with tempfile.TemporaryDirectory() as d:
        trainer.run(cfg, Path(d))
    return PROMPTS * G / _median_step(times)


def _median_step(ends: list[float]) -> float:
    """Median wall time between consecutive step ends, the first step left out (warm-up),
    the same statistic for both programs."""
    return statistics.median(b - a for a, b in zip(ends[1:], ends[2:]))


def run_trl(steps: int) -> float:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.policy import proxy_path
    from trainer.tasks import build_task

    cfg = base_config(steps, "ppo_off_policy")
    path = proxy_path(cfg)
    task = build_task(cfg.task)
    ds = Dataset.from_list([{"prompt": p.prompt, "answer": p.answer} for p in task.train])

    def reward(prompts, completions, answer, **_):
        return [1.0 if c.strip() == a else -1.0 for c, a in zip(completions, answer)]

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            times.append(time.perf_counter())

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
            learning_rate=cfg.optim.lr, lr_scheduler_type="constant", warmup_steps=0, beta=0.0,
            num_generations=G, per_device_train_batch_size=PROMPTS * G,
            max_completion_length=NEW, temperature=1.0, max_steps=steps, report_to="none",
            logging_steps=10_000, save_strategy="no", seed=0, dataloader_num_workers=0,
        )
        GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                    processing_class=tok, callbacks=[Clock()]).train()
    return PROMPTS * G / _median_step(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="4 steps, 1 repeat, the proxy not warmed up: a smoke run (CI)")
    ap.add_argument("--one", choices=["trl", "ablate", "ablate-pipeline"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.steps, a.repeats = 4, 1
    if a.one:
        import torch

        torch.set_num_threads(a.threads)
        sps = run_trl(a.steps) if a.one == "trl" else run_ablate(
            a.steps, "pipeline" if a.one == "ablate-pipeline" else "ppo_off_policy")
        print(json.dumps({"samples_per_s": sps}))
        return
    # Build the cached proxy once before timing anything.
    from trainer.policy import proxy_path

    proxy_path(base_config(a.steps, "ppo_off_policy"))
    res: dict[str, list[float]] = {"trl": [], "ablate": [], "ablate-pipeline": []}
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS=str(a.threads))
    for r in range(a.repeats):
        for name in res:
            out = subprocess.run([sys.executable, __file__, "--one", name, "--steps", str(a.steps),
                                  "--threads", str(a.threads), *(["--quick"] if a.quick else [])],
                                 env=env, capture_output=True,
                                 text=True, cwd=REPO)
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            sps = json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]
            res[name].append(sps)
            print(f"repeat {r} {name:16s} {sps:8.0f} samples/s", flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(json.dumps({"median_samples_per_s": med,
                      "speedup_vs_trl": {k: med[k] / med["trl"] for k in ("ablate", "ablate-pipeline")},
                      "runs": res}, indent=1))


if __name__ == "__main__":
    main()
