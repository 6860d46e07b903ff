"""The hf sampler on CPU: static-cache (trainer.generation.sampler.StaticSampler) vs the previous loop
(DynamicSampler), interleaved call by call so machine load hits both alike.

1. proxy: the CPU proxy's rollout shape (recipes/proxy.yaml's warmed char Llama, 16 "NN+NN="
   prompts x 8 samples, max_new_tokens from the recipe), through HFGenerator.generate (what the
   trainer calls), median seconds per call of each sampler and their ratio.
2. long: a tiny random Llama (hidden 64, 2 layers) decoding 8 rows x 2,048 tokens; time per
   token over the first and the last 256 decode steps (timestamps taken between steps). A
   cache that grows by concatenation copies the whole cache every step, so its last tokens
   cost more than its first; a preallocated one stays flat (ratio near 1).
3. step: the whole trainer step of benchmarks/bench_trainer_vs_trl.py (16 x 8, 4 new tokens,
   on-policy and pipeline), once with each sampler, in alternating processes, samples/s.

    python benchmarks/bench_sampler.py [--repeats 15] [--long-repeats 3] [--step-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from _proxy import proxy_tree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def proxy_setup(warmed: bool = True):
    from trainer.config import TrainConfig
    from trainer.policy import load_model
    from trainer.generation.rollout import HFGenerator
    from trainer.tasks import build_task

    d = proxy_tree(warmed)
    cfg = TrainConfig.model_validate(d)
    model, tok = load_model(cfg)
    model.eval()
    task = build_task(cfg.task)
    prompts = [tok(p.prompt, add_special_tokens=False).input_ids for p in task.train[:16]]
    return cfg, HFGenerator(cfg, model, tok), prompts


def swap(gen, kind: str) -> None:
    """Point the generator's decode loop at one sampler (built once per kind, then reused)."""
    from trainer.generation.sampler import SAMPLERS

    cache = gen.__dict__.setdefault("_bench_samplers", {})
    if kind not in cache:
        cache[kind] = SAMPLERS[kind](gen.model, dtype=gen.dtype, device=gen.device,
                                     lm_head_fp32=gen.head.fp32, synced=False)
    gen.sampler = cache[kind]


def bench_proxy(repeats: int, warmed: bool = True) -> dict:
    cfg, gen, prompts = proxy_setup(warmed)
    r = cfg.rollout
    times: dict[str, list[float]] = {"static": [], "dynamic": []}
    for i in range(repeats + 1):
        for kind in (("static", "dynamic") if i % 2 else ("dynamic", "static")):
            swap(gen, kind)
            t0 = time.perf_counter()
            gen.generate(prompts, n=8, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                         top_p=r.top_p, seed=i)
            if i:  # the first round warms both up
                times[kind].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"shape": f"16 x 8, max_new_tokens {r.max_new_tokens}", "median_s": med,
            "dynamic_over_static": med["dynamic"] / med["static"], "runs": times}


def bench_long(repeats: int, T: int = 2048, B: int = 8, window: int = 256) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.generation.sampler import SAMPLERS, left_pad

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).eval()
    ids, attn = left_pad([[5, 9, 11, 3]] * B, pad=0)
    out: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for kind in ("static", "dynamic"):
            sampler = SAMPLERS[kind](model, dtype="fp32", lm_head_fp32=True, device=torch.device("cpu"))
            stamps: list[float] = []
            sampler.decode(ids, attn, max_new_tokens=T, temperature=1.0, top_p=1.0,
                           gen=torch.Generator().manual_seed(0), eos=-1, version=lambda: 0,
                           between=lambda: stamps.append(time.perf_counter()))
            first = (stamps[window] - stamps[0]) / window * 1e3
            last = (stamps[-1] - stamps[-1 - window]) / window * 1e3
            o = out.setdefault(kind, {"first_ms": [], "last_ms": []})
            o["first_ms"].append(first)
            o["last_ms"].append(last)
    res = {}
    for kind, o in out.items():
        f, lst = statistics.median(o["first_ms"]), statistics.median(o["last_ms"])
        res[kind] = {"first_ms_per_token": f, "last_ms_per_token": lst, "last_over_first": lst / f}
    return {"shape": f"{B} rows x {T} tokens, tiny Llama", **res}


def bench_step(repeats: int, steps: int, threads: int) -> dict:
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(threads))
    res: dict[str, list[float]] = {}
    for r in range(repeats):
        for mode in ("ppo_off_policy", "pipeline"):
            for kind in (("static", "dynamic") if r % 2 else ("dynamic", "static")):
                out = subprocess.run([sys.executable, __file__, "--one-step", kind, "--mode", mode,
                                      "--steps", str(steps), "--threads", str(threads)],
                                     env=env, capture_output=True, text=True, cwd=REPO)
                if out.returncode != 0:
                    sys.exit(f"{mode}/{kind} failed:\n{out.stderr[-3000:]}")
                sps = json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]
                res.setdefault(f"{mode}/{kind}", []).append(sps)
                print(f"repeat {r} {mode}/{kind}: {sps:.0f} samples/s", flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    modes = ("ppo_off_policy", "pipeline")
    # Paired: each repeat runs both samplers back to back, so their ratio sees the same load.
    paired = {m: statistics.median(a / b for a, b in zip(res[f"{m}/static"], res[f"{m}/dynamic"]))
              for m in modes}
    return {"median_samples_per_s": med, "runs": res,
            "static_over_dynamic": {m: med[f"{m}/static"] / med[f"{m}/dynamic"] for m in modes},
            "static_over_dynamic_paired_median": paired}


def one_step(kind: str, mode: str, steps: int) -> float:
    """bench_trainer_vs_trl's timed trainer run, its generator on `kind`'s sampler."""
    import trainer.generation.rollout
    from benchmarks.bench_trainer_vs_trl import run_ablate
    from trainer.generation.sampler import DynamicSampler

    if kind == "dynamic":
        trainer.generation.rollout.static_sampler = lambda model, **kw: DynamicSampler(model, **kw)
    return run_ablate(steps, mode)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--long-repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI): "
                    "1 proxy repeat on the unwarmed proxy, 128 long tokens, no trainer steps")
    ap.add_argument("--step-repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", choices=["proxy", "long", "step"], default=None)
    ap.add_argument("--one-step", choices=["static", "dynamic"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="ppo_off_policy", help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.one_step:
        print(json.dumps({"samples_per_s": one_step(a.one_step, a.mode, a.steps)}))
        return
    torch.set_flush_denormal(True)  # as the trainer does
    out = {}
    if a.quick:
        out = {"proxy": bench_proxy(1, warmed=False),
               "long": bench_long(1, T=128, window=32)}
        out["proxy"].pop("runs")
        print(json.dumps(out))
        return
    if a.only in (None, "proxy"):
        out["proxy"] = bench_proxy(a.repeats)
        print(json.dumps({"proxy": {k: v for k, v in out["proxy"].items() if k != "runs"}}), flush=True)
    if a.only in (None, "long"):
        out["long"] = bench_long(a.long_repeats)
        print(json.dumps({"long": out["long"]}), flush=True)
    if a.only in (None, "step"):
        out["step"] = bench_step(a.step_repeats, a.steps, a.threads)
        print(json.dumps({"step": {k: v for k, v in out["step"].items() if k != "runs"}}), flush=True)


if __name__ == "__main__":
    main()
