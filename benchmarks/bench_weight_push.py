"""Weight-push time, trainer rank 0 -> a vLLM engine in its own process (the GPU-split layout),
by broadcast over a gloo group parameter by parameter (trainer/generation/vllm_engine.py WeightBroadcast).

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/bench_weight_push.py [--pushes 3]

A Qwen2.5-0.5B-shaped model (its config's sizes, random init; 494M parameters, tied
embeddings) in bf16 on vllm-cpu. Each push = the trainer's parameters read one at a time
(cast to the generator's dtype) + broadcast + vLLM's in-place reload + re-tie of the LM head +
prefix-cache reset. Reports the median push, and reading the parameters alone for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from types import SimpleNamespace


def qwen25_05b():
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                      max_position_embeddings=512, rope_theta=1e6, tie_word_embeddings=True,
                      rms_norm_eps=1e-6)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushes", type=int, default=3)
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # engine in its own process
    import torch

    from trainer.config import TrainConfig
    from trainer.generation.vllm_engine import VLLMGenerator
    from trainer.generation.push import named_weights as _named_weights

    model = qwen25_05b()
    n = sum(p.numel() for p in model.parameters())
    cfg = TrainConfig.model_validate({"precision": {"dtype": "bf16"},
                                      "rollout": {"backend": "vllm"},
                                      "engine": {"device": "cpu"}})
    t0 = time.perf_counter()
    gen = VLLMGenerator(cfg, model, SimpleNamespace(eos_token_id=0))  # includes the first push
    start = time.perf_counter() - t0
    assert gen._broadcast is not None, "the push did not go by broadcast"
    snaps, pushes = [], []
    for v in range(1, args.pushes + 1):
        with torch.no_grad():
            next(model.parameters()).add_(1e-3)
        t0 = time.perf_counter()
        list(_named_weights(model, torch.bfloat16))
        snaps.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        gen.sync_weights(model, v)
        pushes.append(time.perf_counter() - t0)
    gen.close()
    mb = n * 2 / 2**20
    med = statistics.median(pushes)
    print(f"params {n / 1e6:.0f}M ({mb:.0f} MiB bf16); engine start + first push {start:.1f}s")
    print(f"push (read + gloo broadcast + reload): median {med:.2f}s of {len(pushes)} "
          f"({mb / med:.0f} MiB/s); reading the parameters alone median "
          f"{statistics.median(snaps):.2f}s; "
          f"all {[round(p, 2) for p in pushes]}")


if __name__ == "__main__":
    main()
