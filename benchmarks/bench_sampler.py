"""The hf sampler on CPU: static-cache (trainer.sampler.StaticSampler) vs the previous loop
(DynamicSampler), interleaved call by call so machine load hits both alike.

1. proxy: the CPU proxy's rollout shape (recipes/proxy.yaml's warmed char Llama, 16 "NN+NN="
   prompts x 8 samples, max_new_tokens from the recipe), through HFGenerator.generate (what the
   trainer calls), median seconds per call of each sampler and their ratio.
2. long: a tiny random Llama (hidden 64, 2 layers) decoding 8 rows x 2,048 tokens; time per
   token over the first and the last 256 decode steps (timestamps taken between steps). A
   cache that grows by concatenation copies the whole cache every step, so its last tokens
   cost more than its first; a preallocated one stays flat (ratio near 1).

    python benchmarks/bench_sampler.py [--repeats 15] [--long-repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def proxy_setup():
    import yaml

    from trainer.config import TrainConfig
    from trainer.model import load_model
    from trainer.rollout import HFGenerator
    from trainer.tasks import build_task

    d = yaml.safe_load((REPO / "recipes" / "proxy.yaml").read_text())
    cfg = TrainConfig.model_validate(d)
    model, tok = load_model(cfg)
    model.eval()
    task = build_task(cfg.task)
    prompts = [tok(p.prompt, add_special_tokens=False).input_ids for p in task.train[:16]]
    return cfg, HFGenerator(cfg, model, tok), prompts


def swap(gen, kind: str) -> None:
    """Point the generator's decode loop at one sampler (built once per kind, then reused)."""
    from trainer.sampler import SAMPLERS

    cache = gen.__dict__.setdefault("_bench_samplers", {})
    if kind not in cache:
        cache[kind] = SAMPLERS[kind](gen.model, dtype=gen.dtype, device=gen.device,
                                     lm_head_fp32=gen.head.fp32, synced=False)
    gen.sampler = cache[kind]


def bench_proxy(repeats: int) -> dict:
    cfg, gen, prompts = proxy_setup()
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

    from trainer.sampler import SAMPLERS, left_pad

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--long-repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", choices=["proxy", "long"], default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # as the trainer does
    out = {}
    if a.only in (None, "proxy"):
        out["proxy"] = bench_proxy(a.repeats)
        print(json.dumps({"proxy": {k: v for k, v in out["proxy"].items() if k != "runs"}}), flush=True)
    if a.only in (None, "long"):
        out["long"] = bench_long(a.long_repeats)
        print(json.dumps({"long": out["long"]}), flush=True)


if __name__ == "__main__":
    main()
