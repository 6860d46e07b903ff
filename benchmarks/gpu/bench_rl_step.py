"""Tokens/s and MFU of one RL step: this trainer vs TRL's GRPOTrainer, same model and batch.

Model: a Qwen2.5-0.5B-shaped Qwen2ForCausalLM (Qwen2Config with the 0.5B shapes: 24 layers,
hidden 896, 14 heads / 2 KV heads, MLP 4864, vocab 151936, tied embeddings) from random init,
so nothing is downloaded. Prompts are random token ids of a fixed length; completions run to
a fixed length (a random model almost never samples EOS among 151,936 ids, and the EOS id is
excluded from the prompt vocabulary). The reward (share of even token ids in the completion)
varies within a group, so neither side can skip the update.

One RL step = generate `prompts x generations` completions + one optimizer step on them
(ScaleRL/PipelineRL: behaviour log-probs from the generator are the old log-probs, no extra
pass; TRL: beta=0 so no reference model, one generation round per optimizer step).

    tokens/s = (prompt + completion tokens of the batch) / step seconds
    MFU      = (2 N x generated-token forward + 6 N x trained tokens) / step s / peak FLOP/s
with N = non-embedding parameters + the LM head (Kaplan-style 2N/6N accounting, attention
FLOPs ignored at these lengths), peak = the device's dense bf16 peak (table below, or
--peak-tflops).

Run (GPU; see benchmarks/gpu/README.md):
    python benchmarks/gpu/bench_rl_step.py --json benchmarks/gpu/result.json
CPU smoke run of the harness itself (tiny shapes, seconds):
    python benchmarks/gpu/bench_rl_step.py --tiny --steps 2 --warmup 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0,
                    "A800": 312.0, "L40S": 362.0, "A10": 125.0, "4090": 165.0}

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                  max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=512,
            tie_word_embeddings=True)


def build(shapes: dict, workdir: Path):
    """Random-init Qwen2 + a WordLevel tokenizer with one token per id, saved to `workdir`
    (TRL and vLLM load from a path; no hub access)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    V = shapes["vocab_size"]
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t1",
                                        eos_token="t2", bos_token="t3")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    cfg = Qwen2Config(**shapes, bos_token_id=3, eos_token_id=2, pad_token_id=1)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(workdir)
    tokenizer.save_pretrained(workdir)
    return model, tokenizer


def load_tokenizer(workdir: Path):
    """The word-level tokenizer as saved. Not AutoTokenizer: transformers 5 picks the class from
    config.json's model_type (Qwen2Tokenizer), which rebuilds a byte-level BPE around the
    word-level vocab and maps "t5 t77" to garbage ids."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(workdir)


def flops_params(model) -> int:
    """N for the 2N/6N rule: every weight matrix a token passes through, the LM head
    included, the embedding lookup (free) excluded; tied weights count once as the head."""
    emb = model.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in model.parameters()) - emb + model.get_output_embeddings().weight.numel()


def peak_flops(args) -> tuple[float, str]:
    if args.peak_tflops:
        return args.peak_tflops * 1e12, "given"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        for key, tf in PEAK_BF16_TFLOPS.items():
            if key in name:
                return tf * 1e12, name
        return float("nan"), name
    return float("nan"), "cpu"


def reward_even_share(completions_ids: list[list[int]]) -> list[float]:
    return [sum(1 for t in ids if t % 2 == 0) / max(1, len(ids)) for ids in completions_ids]


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(4, vocab, (n, length), generator=g)).tolist()  # no specials / EOS


def bench_ours(args, path: Path, shapes: dict, mode: str = "ppo_off_policy") -> dict:
    """The trainer's own loop: `trainer.loop._Run` (what `trainer.run` builds) and the body of
    its `train()` step by step: off-policy source -> `train_step` (rewards, filters,
    advantages, CISPO + prompt aggregation, fp32 head, engine step) -> weight push. Only the
    task is synthetic: the random model's prompts are replaced by the fixed-length random
    prompts TRL gets, and the verifier by the same even-token reward (thresholded to the
    trainer's +1/-1). Eval and checkpoints are outside the timed steps on both sides."""
    from trainer.config import TrainConfig
    from trainer.loop import _Run
    from trainer.offpolicy import MODES

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="ablate-bench-"))
    n_steps = args.warmup + args.steps
    k = 8 if mode == "pipeline" else 1
    n_prompts = args.prompts * (n_steps + k + 2)
    data = work / "prompts.jsonl"  # the loop's math task loads it; prompts are replaced below
    data.write_text("".join(json.dumps({"problem": f"p{i}", "answer": "0"}) + "\n"
                            for i in range(n_prompts + 8)))
    config = TrainConfig.model_validate({
        "model": {"name_or_path": str(path),
                  "gradient_checkpointing": args.gradient_checkpointing},
        "precision": {"dtype": args.dtype, "generator_lm_head_fp32": True,
                      "trainer_lm_head_fp32": True},
        "task": {"name": "math", "path": str(data), "num_train_prompts": n_prompts,
                 "num_eval_prompts": 1},
        "rollout": {"backend": args.backend, "prompts_per_step": args.prompts,
                    "generations_per_prompt": args.generations,
                    "max_new_tokens": args.completion_len},
        "length": {"control": "none"},
        # Train on every sample, as TRL does (no group dropped, no prompt retired).
        "data": {"zero_variance_filter": False, "no_positive_resampling": False},
        "off_policy": {"mode": mode, "k": k},
        "engine": {"type": args.engine, "zero_stage": args.zero_stage, "device": device},
        "optim": {"lr": 1e-6, "warmup_steps": 0},
        "budget": {"steps": n_steps},
    })
    run = _Run(config, work / "run")
    run.tok = run.ctx.tokenizer = load_tokenizer(path)  # same ids; decodes "t5 t77" for the reward
    run.train_prompts[:] = random_prompts(len(run.train_prompts), args.prompt_len,
                                          shapes["vocab_size"], 1234)

    def score(problem, text: str) -> bool:
        ids = [int(w[1:]) for w in text.split() if w[1:].isdigit()]
        return reward_even_share([ids])[0] > 0.5

    run.task.score = score
    source = MODES.get(mode)(run.ctx)
    source.after_step(run.model, run.step)
    times, gen_tokens = [], []
    try:
        for step in range(n_steps):
            _sync(device)
            t0 = time.perf_counter()
            batch = source.next(run.step)
            run.train_step(batch)
            run.step += 1
            source.after_step(run.model, run.step)
            _sync(device)
            if step >= args.warmup:
                times.append(time.perf_counter() - t0)
            gen_tokens.append(sum(len(t) for t in batch.rollout.tokens))
    finally:
        source.close()
    mem = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return {"step_s": times, "completion_tokens": statistics.median(gen_tokens),
            "max_mem_gib": mem}


def bench_trl(args, path: Path, shapes: dict) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = load_tokenizer(path)
    n_prompts = args.prompts * (args.warmup + args.steps)
    texts = [" ".join(f"t{i}" for i in p)
             for p in random_prompts(n_prompts, args.prompt_len, shapes["vocab_size"], 1234)]
    data = Dataset.from_dict({"prompt": texts})
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            _sync("cuda" if torch.cuda.is_available() else "cpu")
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            _sync("cuda" if torch.cuda.is_available() else "cpu")
            times.append(time.perf_counter() - self.t0)

    def reward(completions, completion_ids=None, **kw):
        return reward_even_share(completion_ids)

    bf16 = args.dtype == "bf16" and torch.cuda.is_available()
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), max_steps=args.warmup + args.steps,
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations, max_completion_length=args.completion_len,
        learning_rate=1e-6, lr_scheduler_type="constant", beta=0.0, bf16=bf16,
        use_cpu=not torch.cuda.is_available(), gradient_checkpointing=args.gradient_checkpointing,
        report_to="none", logging_steps=10**6, save_strategy="no", temperature=1.0,
        use_vllm=args.backend == "vllm", **({"vllm_mode": "colocate"} if args.backend == "vllm" else {}),
        shuffle_dataset=False, seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Timer()])
    trainer.train()
    mem = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    return {"step_s": times[args.warmup:],
            "completion_tokens": args.prompts * args.generations * args.completion_len,
            "max_mem_gib": mem}


def _free() -> None:
    """Drop one side's model, optimizer and cached blocks before the other side starts."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def show(r: dict) -> None:
    print(f"{r['impl']:>24}: step {r['step_s_median']:.3f}s  {r['tokens_per_s']:,.0f} tok/s  "
          f"{r['tflops_per_s']:.2f} TFLOP/s  MFU {r['mfu']:.1%}  peak mem "
          f"{r['max_mem_gib']:.1f} GiB  steps {[round(t, 3) for t in r['step_s']]}", flush=True)


def summarize(name: str, r: dict, args, n_flops: int, peak: float) -> dict:
    step = statistics.median(r["step_s"])
    B = args.prompts * args.generations
    gen_tok = r["completion_tokens"]
    all_tok = B * args.prompt_len + gen_tok
    flops = 2 * n_flops * all_tok + 6 * n_flops * all_tok  # gen forward + train fwd/bwd
    out = {"impl": name, "step_s_median": step, "step_s": r["step_s"],
            "tokens_per_s": all_tok / step, "completion_tokens_per_s": gen_tok / step,
            "tflops_per_s": flops / step / 1e12, "mfu": flops / step / peak,
            "max_mem_gib": r.get("max_mem_gib", float("nan"))}
    show(out)  # as soon as it is measured: a later side failing must not lose it
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--generations", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--completion-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf",
                    help="rollout backend for both sides (TRL: use_vllm colocate)")
    ap.add_argument("--engine", choices=["torch", "deepspeed"], default="torch")
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the peak table")
    ap.add_argument("--only", choices=["ours", "trl"], default=None)
    ap.add_argument("--modes", nargs="+", default=["ppo_off_policy", "pipeline"],
                    choices=["ppo_off_policy", "pipeline"],
                    help="off_policy.mode(s) of our loop: on-policy (k=1) and PipelineRL-8")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: CPU smoke test of the harness")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    if args.tiny:
        args.prompt_len, args.completion_len = min(args.prompt_len, 8), min(args.completion_len, 8)
        args.prompts, args.generations = min(args.prompts, 4), min(args.generations, 4)
    torch.set_flush_denormal(True)  # as the trainer does; process-wide, so both sides get it
    if not torch.cuda.is_available():
        args.dtype = "fp32"  # bf16 matmuls are emulated slowly on most CPUs; TRL runs fp32 there
    shapes = TINY if args.tiny else QWEN25_05B
    peak, device = peak_flops(args)
    out = {"device": device, "shapes": "tiny" if args.tiny else "Qwen2.5-0.5B", "args": vars(args) | {"json": str(args.json)}}
    with tempfile.TemporaryDirectory(prefix="bench-model-") as d:
        model, _ = build(shapes, Path(d))
        n = flops_params(model)
        out["flops_params"] = n
        del model
        results = []
        if args.only in (None, "ours"):
            for mode in args.modes:
                results.append(summarize(f"ablate[{mode}]", bench_ours(args, Path(d), shapes, mode),
                                         args, n, peak))
                _free()
        if args.only in (None, "trl"):
            results.append(summarize("trl.GRPOTrainer", bench_trl(args, Path(d), shapes), args, n, peak))
            _free()
    out["results"] = results
    trl = [r for r in results if r["impl"].startswith("trl")]
    if trl:
        out["speedup_vs_trl"] = {r["impl"]: r["tokens_per_s"] / trl[0]["tokens_per_s"]
                                 for r in results if not r["impl"].startswith("trl")}
    print(f"device: {device}  model: {out['shapes']} (N={n / 1e6:.1f}M for FLOPs)")
    for r in results:
        show(r)
    for impl, x in out.get("speedup_vs_trl", {}).items():
        print(f"{impl} vs TRL (tokens/s): {x:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
