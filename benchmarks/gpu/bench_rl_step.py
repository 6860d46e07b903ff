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

Issue 25 adds, per shape (`--shapes short long`: 8 prompts x 8 samples x (256 + 256) and
8 x 8 x (256 + 2,048)) and per sampler of our side (`--samplers static dynamic`: the
static-cache sampler, trainer/generation/sampler.py, and the previous DynamicCache loop):
  - the whole step as above (tokens/s, MFU, peak memory), and
  - decode ms per step: the hf generator alone (bf16 body, fp32 head) timed for T tokens and
    for 1 token (the prefill), (t_T - t_1) / (T - 1), against the bandwidth roofline: bytes a
    decode step must read (bf16 matmul weights + the fp32 head + the KV cache at the mean
    context length) / HBM bandwidth (table below, or --hbm-tbps).
TRL runs with its stability settings for bf16 (fp32 master weights under bf16 autocast,
cast_lm_head_to_fp32, max_grad_norm 1, a lower lr: --trl-lr); a step that leaves non-finite
weights stops it and is recorded (`trl_error`), as is any exception, so one failing side never
loses the others' figures.

Run (GPU; see benchmarks/gpu/README.md):
    python benchmarks/gpu/bench_rl_step.py --shapes short long --json benchmarks/gpu/result_issue25.json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_bench import bench_decode, decode_step_bytes, finite_guard, hbm_bytes_per_s, use_sampler  # noqa: E402

HBM_TBPS = {"H100": 3.35, "H200": 4.8, "H800": 3.35, "A100": 2.0, "A800": 2.0, "L40S": 0.864,
            "A10": 0.6, "4090": 1.0}
# (prompts, samples per prompt, prompt tokens, completion tokens)
SHAPES = {"short": (8, 8, 256, 256), "long": (8, 8, 256, 2048)}
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


def bench_ours(args, path: Path, shapes: dict, mode: str = "ppo_off_policy",
               sampler: str = "static") -> dict:
    """The trainer's own loop: the run `trainer.loop.train.start` builds (what `trainer.run`
    trains) and the body of its `train()` step by step: off-policy source -> `train_step` (rewards, filters,
    advantages, CISPO + prompt aggregation, fp32 head, engine step) -> weight push. Only the
    task is synthetic: the random model's prompts are replaced by the fixed-length random
    prompts TRL gets, and the verifier by the same even-token reward (thresholded to the
    trainer's +1/-1). Eval and checkpoints are outside the timed steps on both sides."""
    from trainer.config import TrainConfig
    from trainer.loop.train import start, train_step
    from trainer.torch_axes import MODES

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
    run = start(config, work / "run")
    p, s = run.parts, run.state
    # same ids; decodes "t5 t77" for the reward
    p.tok = run.ctx.tokenizer = run.update.tok = load_tokenizer(path)
    p.train_prompts[:] = random_prompts(len(p.train_prompts), args.prompt_len,
                                        shapes["vocab_size"], 1234)

    def score(problem, text: str) -> bool:
        ids = [int(w[1:]) for w in text.split() if w[1:].isdigit()]
        return reward_even_share([ids])[0] > 0.5

    p.task.score = score
    source = MODES.get(mode)(run.ctx)
    use_sampler(source, sampler)
    source.after_step(p.model, s.step)
    times, gen_tokens = [], []
    try:
        for step in range(n_steps):
            _sync(device)
            t0 = time.perf_counter()
            batch = source.next(s.step)
            train_step(run, batch)
            s.step += 1
            source.after_step(p.model, s.step)
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
        learning_rate=args.trl_lr, lr_scheduler_type="constant", beta=0.0, bf16=bf16,
        cast_lm_head_to_fp32=bf16, max_grad_norm=1.0,
        use_cpu=not torch.cuda.is_available(), gradient_checkpointing=args.gradient_checkpointing,
        report_to="none", logging_steps=10**6, save_strategy="no", temperature=1.0,
        use_vllm=args.backend == "vllm", **({"vllm_mode": "colocate"} if args.backend == "vllm" else {}),
        shuffle_dataset=False, seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    guard = finite_guard()  # model kept in fp32 (master weights); bf16=True autocasts
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Timer(), guard])
    error = None
    try:
        trainer.train()
    except Exception as e:  # recorded: a crash is a finding, and must not lose our figures
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    if guard.bad_step is not None:
        error = f"non-finite weights after optimizer step {guard.bad_step}" + (f"; {error}" if error else "")
    mem = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    if error:
        print(f"trl.GRPOTrainer: {error}", flush=True)
    return {"step_s": times[args.warmup:] or [float("nan")], "error": error,
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
            "max_mem_gib": r.get("max_mem_gib", float("nan")), "error": r.get("error")}
    show(out)  # as soon as it is measured: a later side failing must not lose it
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["short", "long"],
                    help="short: 8 x 8 x (256 + 256); long: 8 x 8 x (256 + 2,048)")
    ap.add_argument("--samplers", nargs="+", choices=["static", "dynamic"],
                    default=["static", "dynamic"], help="our side's decode loop (new, previous)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf",
                    help="rollout backend for both sides (TRL: use_vllm colocate)")
    ap.add_argument("--engine", choices=["torch", "deepspeed"], default="torch")
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the peak table")
    ap.add_argument("--hbm-tbps", type=float, default=None, help="override the bandwidth table")
    ap.add_argument("--trl-lr", type=float, default=1e-7,
                    help="TRL's learning rate (lower than ours: its bf16 run diverged at 1e-6)")
    ap.add_argument("--only", choices=["ours", "trl", "decode"], default=None)
    ap.add_argument("--modes", nargs="+", default=["ppo_off_policy", "pipeline"],
                    choices=["ppo_off_policy", "pipeline"],
                    help="off_policy.mode(s) of our loop: on-policy (k=1) and PipelineRL-8")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: CPU smoke test of the harness")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    return ap.parse_args()


def run_shape(args, d: Path, shapes: dict, n: int, peak: float, bw: float) -> dict:
    """Every side on one (prompts, samples, prompt, completion) shape: our loop per mode and
    sampler, the generator's decode per sampler (vs the roofline), then TRL."""
    out: dict = {"shape": [args.prompts, args.generations, args.prompt_len, args.completion_len]}
    results, decode = [], []
    for sampler in args.samplers if args.only in (None, "ours") else []:
        for mode in args.modes:
            results.append(_guarded(f"ablate[{mode},{sampler}]", lambda: summarize(
                f"ablate[{mode},{sampler}]", bench_ours(args, d, shapes, mode, sampler), args, n, peak)))
            _free()
    if args.backend == "hf" and args.only in (None, "decode"):
        tok = load_tokenizer(d)
        prompts = random_prompts(args.prompts, args.prompt_len, shapes["vocab_size"], 99)
        for sampler in args.samplers:
            r = _guarded(f"decode[{sampler}]", lambda: bench_decode(
                d, tok, prompts, args.generations, args.completion_len, sampler, args.dtype))
            if "decode_ms_per_step" in r:
                r["roofline_ms"] = r["decode_bytes_per_step"] / bw * 1e3
                r["x_roofline"] = r["decode_ms_per_step"] / r["roofline_ms"]
                print(f"decode[{sampler}]: {r['decode_ms_per_step']:.2f} ms/step, roofline "
                      f"{r['roofline_ms']:.2f} ms ({r['x_roofline']:.1f}x), peak mem "
                      f"{r['max_mem_gib']:.1f} GiB", flush=True)
            decode.append(r)
            _free()
    if args.only in (None, "trl"):
        results.append(_guarded("trl.GRPOTrainer", lambda: summarize(
            "trl.GRPOTrainer", bench_trl(args, d, shapes), args, n, peak)))
        _free()
    out["results"], out["decode"] = results, decode
    trl = [r for r in results if r.get("impl", "").startswith("trl") and not r.get("error")]
    if trl:
        out["speedup_vs_trl"] = {r["impl"]: r["tokens_per_s"] / trl[0]["tokens_per_s"]
                                 for r in results if "tokens_per_s" in r and r is not trl[0]}
    return out


def _guarded(name: str, fn) -> dict:
    """One side's result, or its error: a side that fails must not lose the others' figures."""
    try:
        return fn()
    except Exception as e:
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        print(f"{name} FAILED: {msg}", flush=True)
        return {"impl": name, "error": msg}


def main() -> None:
    args = parse_args()
    torch.set_flush_denormal(True)  # as the trainer does; process-wide, so both sides get it
    if not torch.cuda.is_available():
        args.dtype = "fp32"  # bf16 matmuls are emulated slowly on most CPUs; TRL runs fp32 there
    shapes = TINY if args.tiny else QWEN25_05B
    peak, device = peak_flops(args)
    bw = hbm_bytes_per_s(args, HBM_TBPS)
    out = {"device": device, "model": "tiny" if args.tiny else "Qwen2.5-0.5B",
           "hbm_bytes_per_s": bw, "args": vars(args) | {"json": str(args.json)}, "shapes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-model-") as d:
        model, _ = build(shapes, Path(d))
        n = flops_params(model)
        out["flops_params"] = n
        del model
        for name in args.shapes:
            args.prompts, args.generations, args.prompt_len, args.completion_len = SHAPES[name]
            if args.tiny:
                args.prompts, args.generations, args.prompt_len = 4, 4, 8
                args.completion_len = 8 if name == "short" else 64
            print(f"== shape {name}: {args.prompts} x {args.generations} x "
                  f"({args.prompt_len} + {args.completion_len})", flush=True)
            out["shapes"][name] = run_shape(args, Path(d), shapes, n, peak, bw)
            if args.json:  # after every shape: a later failure keeps what was measured
                args.json.write_text(json.dumps(out, indent=2))
    print(f"device: {device}  model: {out['model']} (N={n / 1e6:.1f}M for FLOPs)")
    for name, r in out["shapes"].items():
        for x in r["results"]:
            if "tokens_per_s" in x:
                show(x)
        for impl, x in r.get("speedup_vs_trl", {}).items():
            print(f"[{name}] {impl} vs TRL (tokens/s): {x:.2f}x")


if __name__ == "__main__":
    main()
