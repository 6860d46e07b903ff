"""Pieces of bench_rl_step.py for issue 25: which sampler our side runs, the generator's decode
time per step against the HBM-bandwidth roofline, and TRL's non-finite-weights guard."""

from __future__ import annotations

import time
from pathlib import Path

import torch


def use_sampler(source, kind: str) -> None:
    """Point an off-policy source's hf generator at one sampler ("static": trainer/generation/sampler.py's
    default; "dynamic": the previous DynamicCache loop). A pipeline thread may already be in a
    generate call with the default one: that call is a warm-up step, the next uses `kind`."""
    from trainer.generation.rollout import HFGenerator
    from trainer.generation.sampler import SAMPLERS

    gen = getattr(source, "gen", None)
    if kind == "static" or not isinstance(gen, HFGenerator):
        return
    gen.sampler = SAMPLERS[kind](gen.model, dtype=gen.dtype, device=gen.device,
                                 lm_head_fp32=gen.head.fp32, synced=gen.synced)


def hbm_bytes_per_s(args, table: dict[str, float]) -> float:
    if args.hbm_tbps:
        return args.hbm_tbps * 1e12
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        for key, tb in table.items():
            if key in name:
                return tb * 1e12
    return float("nan")


def decode_step_bytes(model, rows: int, prompt: int, completion: int, head_fp32: bool) -> float:
    """Bytes one decode step must read at least: every matmul weight once in bf16 (the LM head
    in fp32 when it runs in fp32; the embedding lookup reads only `rows` rows), plus the KV
    cache at the mean context length of the generation, in bf16."""
    cfg = model.config
    head = model.get_output_embeddings().weight
    emb = model.get_input_embeddings().weight
    body = sum(p.numel() for p in model.parameters()) - emb.numel()
    head_bytes = head.numel() * (4 if head_fp32 else 2)
    if head is not emb:
        body -= head.numel()
    kv_heads = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    ctx = prompt + completion / 2
    kv = rows * cfg.num_hidden_layers * 2 * kv_heads * head_dim * 2 * ctx
    return 2 * body + head_bytes + kv


def bench_decode(path: Path, tok, prompts: list[list[int]], n: int, completion: int,
                 sampler: str, dtype: str, repeats: int = 3) -> dict:
    """The hf generator alone on the saved model: median seconds for `completion` tokens and
    for one token (prefill + first sample); decode ms per step = their difference / (T - 1)."""
    from transformers import AutoModelForCausalLM

    from trainer.config import TrainConfig
    from trainer.generation.rollout import HFGenerator
    from trainer.generation.sampler import SAMPLERS

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
    cfg = TrainConfig.model_validate({"precision": {"dtype": dtype, "generator_lm_head_fp32": True}})
    gen = HFGenerator(cfg, model, tok, own_copy=False)
    if sampler != "static":
        gen.sampler = SAMPLERS[sampler](model, dtype=dtype, device=dev, lm_head_fp32=True)
    n_prompts, prompt = len(prompts), len(prompts[0])

    def timed(T: int) -> float:
        _sync(dev)
        t0 = time.perf_counter()
        gen.generate(prompts, n=n, max_new_tokens=T, temperature=1.0, top_p=1.0, seed=0)
        _sync(dev)
        return time.perf_counter() - t0

    timed(completion)  # warm-up: compiles / captures the decode step
    timed(1)
    full = sorted(timed(completion) for _ in range(repeats))[repeats // 2]
    first = sorted(timed(1) for _ in range(repeats))[repeats // 2]
    step_ms = (full - first) / max(1, completion - 1) * 1e3
    nbytes = decode_step_bytes(model, n_prompts * n, prompt, completion, head_fp32=True)
    mem = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    del gen, model
    return {"sampler": sampler, "generate_s": full, "prefill_s": first, "decode_ms_per_step": step_ms,
            "decode_bytes_per_step": nbytes, "max_mem_gib": mem,
            "completion_tokens_per_s": n_prompts * n * completion / full}


def finite_guard():
    """A TrainerCallback that stops TRL after a step that left a non-finite weight, and says
    after which step (TRL died on NaN weights after its first step on the issue-9 stack)."""
    from transformers import TrainerCallback

    class Guard(TrainerCallback):
        bad_step: int | None = None

        def on_step_end(self, args, state, control, model=None, **kw):
            if model is not None and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                self.bad_step = state.global_step
                control.should_training_stop = True

    return Guard()


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()
