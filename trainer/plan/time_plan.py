"""How long a run will take, beside how much memory it needs (trainer/plan/memory.py): per step
(generation and training), per evaluation, to the budget (wall hours, GPU-hours), and how many
Slurm jobs (requeues) that takes under a profile's time limit.

Why: a plan that covers memory only lets a study be launched that cannot finish. A step-0 eval
that takes hours behind a 2-hour barrier inside a 4-hour job fails as surely as an OOM, and a
run that needs 650 hours of wall time under `max_num_timeout: 50` x 4 h jobs stops at 200.
`ablate sweep --dry-run` shows this plan; `ablate sweep` refuses a study whose plan cannot
reach its budget under the profile (ablate/studies/sweep.py, `--force` overrides).

Pure Python (no torch): ablate plans thousands of variants with it. Every number below is an
estimate from named constants; each constant says where it comes from, and the ones that are
assumptions say so. What is not modelled: network weight pushes (~1 s a step at 8B), the
reward scorer, data loading, the hf sampler's Python overhead on GPUs.

The model (per step, B = sequences an engine decodes at once, ctx = their mean context):
- Generation on GPUs, one decode iteration of an engine over `tp` GPUs reads the weights and
  the KV cache of the B sequences (decode is memory-bound, Kwon et al. 2023 "Efficient Memory
  Management for LLM Serving with PagedAttention" sec. 2; the roofline of Williams et al. 2009):
      t_iter = max((W/tp + B*ctx*kv/tp) / (HBM_BW * DECODE_BW_EFFICIENCY),
                   B*(2N + attention)/tp / (PEAK * DECODE_MFU))
  so an engine makes B / t_iter tokens/s; prompts are prefilled once per group (vLLM's prefix
  cache shares the G samples' prompt) at PREFILL_MFU. B is the fewest of vLLM's max_num_seqs,
  the sequences the engine is sent (trainer/plan/placement.py) and what its KV room
  holds at the mean context (PagedAttention allocates blocks as sequences grow). Where the
  engines run (placement.py): in pipeline mode with vLLM every node's engines decode their
  node's prompts_per_step / nodes groups, so the rollouts' rate is nodes x replicas engines;
  eval goes to rank 0's node's replicas only. Otherwise one engine set, on rank 0's node.
- Training on GPUs: 6N FLOPs per token (forward 2N + backward 4N; Kaplan et al. 2020 sec. 2.1)
  + 2N more with activation checkpointing (one forward recomputed) + causal attention
  (Narayanan et al. 2021 eq. 3's attention term), over the data-parallel ranks at TRAIN_MFU.
- Pipeline mode overlaps the two (a step is the slower of them); ppo_off_policy and the hf
  backend take turns (their sum).
- CPU (the proxy): constants measured on this project's 2-core machine
  (benchmarks/bench_time_plan.py measures them and checks the plan against the proxy's real
  step times; benchmarks/RESULTS.md "Time plan").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.placement import Engines, engines, eval_rows, rollout_rows
from trainer.plan.model_shape import ModelShape, model_shape, proxy_shape
from trainer.plan.memory import (CUDA_OVERHEAD_GIB, PROMPT_TOKENS, VLLM_SHARED_UTILIZATION,
                               VLLM_UTILIZATION, kv_bytes_per_token, on_cpu, sequence_tokens,
                               training_dp)
from trainer.validate import JobShape

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

# Training MFU. Source: Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4):
# 38-43% BF16 MFU on H100s with tuned 4D parallelism. We take less: ZeRO-3 gathers every layer
# over the network for each micro-batch and recomputes activations (the recompute is counted in
# the FLOPs, not in the MFU). An assumption, not a measurement of this trainer on GPUs.
TRAIN_MFU = 0.35
# Share of HBM bandwidth a decode iteration attains. Assumption: vLLM's paged-attention decode
# kernels and weight GEMVs at large batch run below the datasheet peak. A check against the
# paper's own pace (scalerl.md: ~1.5k GPU-hours ~ ~1k steps of 768 samples on 80 GPUs, i.e.
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
VLLM_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs (vllm/config: SchedulerConfig)
# Planned length of a completion, as a share of its cap. 1.0: every sample runs to its cap, an
# upper bound on the step time (the paper interrupts thinking at a budget drawn in [10k, 12k]
# of 12,288 and reports truncation under 5%, so long reasoning samples sit near the cap). A
# first job's `train/response_len` says the real share.
COMPLETION_SHARE = 1.0
# A job's start before its first step: weights from shared storage, vLLM engine start (CUDA
# graphs captured), DeepSpeed init, checkpoint load. Assumption (vLLM alone starts in ~1-3 min
# for an 8B model; 25 s for the CPU build on a 1M-param model, notes/machine-facts.md).
JOB_START_S_GPU = 600.0
JOB_START_S_CPU = 30.0  # measured: a proxy run's start (warm-up cached) on this machine, ~10-30 s
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


@dataclass
class TimePlan:
    """Seconds and hours of one run; `None`: not planned (the note says why)."""

    device: str = ""  # e.g. "H100 SXM (datasheet)", "CPU (measured on the 2-core machine)"
    steps: Optional[int] = None  # optimizer steps to the budget
    step_s: Optional[float] = None  # wall seconds per step
    generation_s: Optional[float] = None  # of a step: generation
    train_s: Optional[float] = None  # of a step: training
    overlap: str = ""  # how generation and training share a step
    generation_tokens_per_s: Optional[float] = None  # the job's engines together
    eval_s: Optional[float] = None  # one evaluation
    evals: Optional[int] = None  # evaluation points to the budget
    eval_blocks_training: Optional[bool] = None
    eval_interval_s: Optional[float] = None  # wall between two evaluations (every_steps)
    checkpoint_s: Optional[float] = None
    checkpoints: Optional[int] = None
    wall_h: Optional[float] = None  # to the budget, job starts included
    gpu_hours: Optional[float] = None  # wall x devices held
    devices: Optional[int] = None
    job_h: Optional[float] = None  # the profile's time limit per job
    jobs: Optional[int] = None  # jobs to the budget (1 + requeues)
    requeues: Optional[int] = None
    max_requeues: Optional[int] = None  # the profile's max_num_timeout (None: no limit known)
    # What submitit's max_num_timeout is set to for this run: the profile's integer, or under
    # `max_num_timeout: auto` the requeues derived here with headroom (auto_max_num_timeout)
    max_num_timeout: Optional[int] = None
    eval_jobs: Optional[int] = None  # jobs an eval's progress spans (chunks kept at requeues)
    steps_per_job: Optional[int] = None
    reaches_budget: Optional[bool] = None
    problem: str = ""  # why it cannot reach the budget, and what to change (one line)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Limits:
    """What the launch profile allows one run: a job's time limit, the requeues after it, the
    seconds of warning before it (Slurm's signal_delay_s); `max_requeues` None = unbounded."""

    time_min: Optional[float] = None
    max_requeues: Optional[int] = None
    signal_delay_s: Optional[float] = None
    gpu_model: Optional[str] = None
    time_key: str = "slurm.time_min"  # the profile key a message tells to raise
    requeue_key: Optional[str] = "slurm.max_num_timeout"  # None: not settable in the profile
    auto_requeues: bool = False  # max_num_timeout: auto (the job gets the derived requeues)


# `max_num_timeout: auto`: the requeues the plan derives, plus this share and AUTO_EXTRA more.
# Why headroom: the plan is an estimate (COMPLETION_SHARE, MFUs are assumptions), and a cap
# one short ends a run just before its budget; submitit counts only time-limit requeues
# against it (submitit/core/job_environment.py checkpoint_and_try_requeue: countdown =
# _timeout_countdown - timed_out), so preemptions take none of it.
AUTO_HEADROOM = 0.1
AUTO_EXTRA = 2


def auto_max_num_timeout(requeues: int) -> int:
    """submitit's max_num_timeout for a run whose plan needs `requeues` time-limit requeues."""
    return math.ceil(requeues * (1 + AUTO_HEADROOM)) + AUTO_EXTRA


def lengths(c: TrainConfig) -> tuple[float, float]:
    """(prompt tokens, planned completion tokens) of one sample: the completion cap x
    COMPLETION_SHARE, and a prompt of the paper's 2,048-token budget for a real model
    (trainer/plan/memory.py PROMPT_TOKENS, an upper bound); the proxy's arithmetic task has
    character prompts of digits x 2 + 2 ("12+34="). On the quickstart the proxy's mean
    completion is ~4.9 of its cap of 6 (from its FLOPs budget and the 781 steps it took,
    benchmarks/RESULTS.md "Time plan"), so its planned steps are longer than measured."""
    seq = sequence_tokens(c)
    if c.model.name_or_path is None:
        cap = min(c.rollout.max_new_tokens, seq)
        prompt = 2 * c.task.digits + 2 if c.task.name == "arithmetic" else max(1, seq - cap)
        return prompt, cap * COMPLETION_SHARE
    return PROMPT_TOKENS, (seq - PROMPT_TOKENS) * COMPLETION_SHARE


def trained_tokens(c: TrainConfig) -> float:
    """Token positions a step's forward processes, as trainer/loop/update.py counts them for the
    FLOPs: every row whole under micro-batches or activation checkpointing; otherwise each
    prompt once for its G samples (the shared-prefix forward) plus the completions but their
    last token. Zero-variance filtering drops groups from this (not planned: data-dependent;
    a FLOPs budget then takes more steps than planned)."""
    samples, prompt, completion = _sample_counts(c)
    if c.engine.micro_batch_tokens is not None or c.model.gradient_checkpointing:
        return samples * (prompt + completion)
    return c.rollout.prompts_per_step * prompt + samples * max(completion - 1, 0)


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


def engine_concurrency(c: TrainConfig, m: ModelShape, e: Engines, shape: JobShape,
                       rows: int, ctx: float) -> float:
    """Sequences one engine decodes at once: the fewest of max_num_seqs, those it is sent and
    what its KV room holds at the mean context (trainer/plan/memory.py's KV room, per token)."""
    held, gpu_gib = float(min(VLLM_MAX_NUM_SEQS, rows)), shape.gpu_memory_gib
    if gpu_gib is None:
        return held
    util = c.rollout.vllm.gpu_memory_utilization or (  # as trainer/plan/memory.py plans it
        VLLM_UTILIZATION if (shape.gpus_per_node or 0) >= 2 else VLLM_SHARED_UTILIZATION)
    b = 2 if c.precision.dtype == "bf16" else 4
    per_gpu = util * gpu_gib * GIB - m.params * b / e.tp - CUDA_OVERHEAD_GIB * GIB
    room_tokens = max(0.0, per_gpu) * e.tp / kv_bytes_per_token(c, m)
    return max(1.0, min(held, room_tokens / max(ctx, 1.0)))


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
    runs on every rank at once (trainer/loop/eval_point.py launch_eval) and a stop is taken only
    between generate calls (trainer/generation/rollout.py `synced`), not between decode steps."""
    return (c.rollout.backend == "hf" and c.engine.type == "deepspeed"
            and c.engine.zero_stage == 3)


def eval_overlaps_training(c: TrainConfig) -> bool:
    """Whether an evaluation runs beside training instead of stopping it: everywhere but the
    lockstep case (rank 0's eval worker, trainer/generation/eval_service.py)."""
    return not _lockstep(c)


# A stop's margin besides the checkpoint: the job requeues itself max(30 s, a tenth of the
# warning) before the limit whatever the trainer does (ablate/studies/launch/slurm.py
# requeue_within), and the stop reaches generation and eval at their next decode step and the
# trainer at its next all-reduce (seconds; trainer/preempt.py): STOP_REACH_S, an assumption.
STOP_REACH_S = 30.0


def stop_margin_s(signal_delay_s: float) -> float:
    """Seconds of the stop signal's warning that the checkpoint cannot use."""
    return max(30.0, 0.1 * signal_delay_s) + STOP_REACH_S


def stop_saves_at_once(c: TrainConfig) -> bool:
    """Whether a stop signal inside a step saves the last finished step at once (the stop is
    checked between decode steps and engine steps: trainer/preempt.py check), or only at the
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


def plan_time(c: TrainConfig, shape: JobShape, limits: Limits = Limits()) -> TimePlan:
    """The time plan of one run on `shape` under `limits` (see the module doc)."""
    name = c.model.name_or_path
    m, why = (proxy_shape(c), "") if name is None else model_shape(name)
    tp = TimePlan()
    if m is None:
        tp.note = f"model shape unknown: {why}; no time estimate"
        return tp
    gpus = shape.gpus_per_node
    if gpus:
        _gpu_step(c, m, shape, limits, tp)
    elif on_cpu(c, shape):
        _cpu_step(c, m, shape, tp)
    else:
        tp.note = ("no time estimate: the profile names no GPUs for a "
                   f"{m.params / 1e9:.1f}B model (set slurm.gpus_per_node)"
                   if gpus == 0 else "no time estimate: GPUs not known here (use a profile "
                   "with slurm.gpus_per_node, e.g. --profile slurm_gpu)")
        return tp
    _to_budget(c, m, shape, limits, tp)
    return tp


def _sample_counts(c: TrainConfig) -> tuple[int, float, float]:
    samples = c.rollout.prompts_per_step * c.rollout.generations_per_prompt
    prompt, completion = lengths(c)
    return samples, prompt, completion


def _gpu_step(c: TrainConfig, m: ModelShape, shape: JobShape, limits: Limits,
              tp: TimePlan) -> None:
    key = (limits.gpu_model or DEFAULT_GPU).lower()
    gpu = GPUS.get(key, GPUS[DEFAULT_GPU])
    why = "datasheet" if limits.gpu_model else "assumed: no gpu_model in the profile"
    tp.device = f"{gpu.name} ({why})"
    tp.assumptions += [f"GPU: {gpu.source}", f"training MFU {TRAIN_MFU:g} (Llama 3 Table 4: "
                       "38-43% on H100; less under ZeRO-3)",
                       f"decode at {DECODE_BW_EFFICIENCY:g} of HBM bandwidth (assumption)"]
    samples, prompt, completion = _sample_counts(c)
    tp.assumptions.append(f"{prompt:,.0f} prompt + {completion:,.0f} completion tokens a sample "
                          f"({COMPLETION_SHARE:.0%} of the cap: an upper bound)")
    ctx = prompt + completion / 2  # mean context of a decoding sequence
    gen_tokens = samples * completion
    prefill = c.rollout.prompts_per_step * prompt
    if c.rollout.backend == "vllm":
        # Rollouts: every node's engines, each its node's call over its replicas (in pipeline
        # mode every node generates prompts_per_step / nodes groups; otherwise one node);
        # eval: rank 0's node's engines only (trainer/plan/placement.py).
        e = engines(c, shape)
        b = engine_concurrency(c, m, e, shape,
                               math.ceil(rollout_rows(c, e.nodes) / e.replicas), ctx)
        rate = e.nodes * e.replicas * decode_rate(m, c, gpu, tp=e.tp, concurrent=b, ctx=ctx,
                                                  bw_eff=DECODE_BW_EFFICIENCY)
        gen_gpus, eval_gpus = e.nodes * e.replicas * e.tp, e.replicas * e.tp
        on = f" on each of {e.nodes} nodes" if e.nodes > 1 else ""
        tp.assumptions.append(f"{e.replicas} engine(s) of {e.tp} GPU(s){on}, {b:.0f} sequences "
                              "decoding at once each")
        eval_b = engine_concurrency(c, m, e, shape,
                                    math.ceil(eval_rows(c) / e.replicas), ctx)
        eval_rate = e.replicas * decode_rate(m, c, gpu, tp=e.tp, concurrent=eval_b, ctx=ctx,
                                             bw_eff=DECODE_BW_EFFICIENCY)
    else:  # the hf sampler on the training GPUs, each rank its rows
        dp = training_dp(c, shape)
        rows = math.ceil(samples / dp)
        rate = dp * hf_rate(m, c, gpu, rows, ctx)
        gen_gpus = eval_gpus = dp
        eval_k = c.eval.samples_per_prompt
        eval_batch = max(eval_k, (c.eval.batch_size or 64 * eval_k) // eval_k * eval_k)
        eval_rate = hf_rate(m, c, gpu, eval_batch, ctx)  # rank 0 alone (or ranks in lockstep)
        tp.assumptions.append(f"hf sampler: {HF_GPU_DECODE_ITER_S * 1e3:g} ms a decode "
                              "iteration besides its memory reads (measured on an H100, before "
                              "the captured decode step)")
    prefill_s = prefill * 2.0 * m.params / (gpu.peak_flops * PREFILL_MFU * gen_gpus)
    tp.generation_tokens_per_s = round(rate, 1)
    tp.generation_s = gen_tokens / rate + prefill_s
    dp = training_dp(c, shape)
    flops = train_flops(c, m, samples * (prompt + completion), (prompt + completion) / 2)
    tp.train_s = flops / (dp * gpu.peak_flops * TRAIN_MFU)
    n_eval = (c.eval.num_prompts or c.task.num_eval_prompts)
    tp.eval_s = (n_eval * c.eval.samples_per_prompt * completion / eval_rate
                 + n_eval * prompt * 2.0 * m.params / (gpu.peak_flops * PREFILL_MFU * eval_gpus))
    _combine(c, tp)
    mixed = c.engine.type == "deepspeed" and c.precision.dtype == "bf16"
    tp.checkpoint_s = m.params * (14 if mixed else 16) / CHECKPOINT_BYTES_PER_S
    tp.devices = shape.nodes * (shape.gpus_per_node or 1)


def _cpu_step(c: TrainConfig, m: ModelShape, shape: JobShape, tp: TimePlan) -> None:
    """The CPU proxy: per-iteration decode overhead plus FLOPs, training FLOPs plus a per-step
    overhead (constants measured on this project's machine)."""
    tp.device = "CPU (constants measured on the project's 2-core machine, one thread)"
    samples, prompt, completion = _sample_counts(c)
    calls = 1
    if c.off_policy.mode == "pipeline" and c.off_policy.groups_per_call:
        calls = math.ceil(c.rollout.prompts_per_step / c.off_policy.groups_per_call)
    ctx = prompt + completion / 2
    iters = calls * (completion + 1)
    gen_flops = samples * (completion * 2.0 * m.params + prompt * 2.0 * m.params)
    tp.generation_s = iters * CPU_DECODE_ITER_S + gen_flops / CPU_DECODE_FLOPS
    tp.generation_tokens_per_s = round(samples * completion / tp.generation_s, 1)
    tp.train_s = (train_flops(c, m, samples * (prompt + completion), ctx) / CPU_TRAIN_FLOPS
                  + CPU_STEP_OVERHEAD_S)
    n_eval = c.eval.num_prompts or c.task.num_eval_prompts
    rows = n_eval * c.eval.samples_per_prompt
    per_call = c.eval.batch_size or 64 * c.eval.samples_per_prompt
    tp.eval_s = (math.ceil(rows / per_call) * (completion + 1) * CPU_DECODE_ITER_S
                 + rows * (completion + prompt) * 2.0 * m.params / CPU_DECODE_FLOPS)
    tp.assumptions.append(f"{prompt:,.0f} prompt + {completion:,.0f} completion tokens a sample")
    _combine(c, tp)
    tp.checkpoint_s = m.params * 16 / 200e6  # local disk, measured order: ~200 MB/s
    tp.devices = shape.world


def _combine(c: TrainConfig, tp: TimePlan) -> None:
    """A step's wall from its parts: pipeline overlaps generation and training when the
    generator has a device of its own (vLLM on its own GPUs; a thread on CPU); otherwise
    they take turns."""
    gen, train = tp.generation_s or 0.0, tp.train_s or 0.0
    if c.off_policy.mode == "pipeline" and tp.device.startswith("CPU"):
        # The generator is a thread of the trainer's process: at the proxy's size both sides
        # are mostly Python overhead under one GIL, so they take turns (measured: the sum is
        # 5-27% over the proxy's pipeline steps, the max 23-37% under; loaded).
        tp.step_s = gen + train
        tp.overlap = "pipeline on CPU: generator thread and trainer share the GIL (taking turns)"
    elif c.off_policy.mode == "pipeline" and c.rollout.backend != "vllm":
        tp.step_s = gen + train
        tp.overlap = "pipeline with the hf generator: it shares the training GPUs (taking turns)"
    elif c.off_policy.mode == "pipeline":
        tp.step_s = max(gen, train)
        tp.overlap = "pipeline: generation and training overlap (the slower sets the pace)"
    else:
        tp.step_s = gen + train
        tp.overlap = f"{c.off_policy.mode}: generation, then training"
    tp.eval_blocks_training = not eval_overlaps_training(c)


def _to_budget(c: TrainConfig, m: ModelShape, shape: JobShape, limits: Limits,
               tp: TimePlan) -> None:
    """Steps, evals, checkpoints, wall and GPU-hours to the budget; jobs and requeues under
    the profile's limits; what stops the run from reaching its budget."""
    samples, prompt, completion = _sample_counts(c)
    per_step_flops = 2.0 * m.params * samples * completion + 6.0 * m.params * trained_tokens(c)
    steps = budget_steps(c, tp.step_s, per_step_flops, tp.devices or 1)
    if steps is None:
        tp.note = "no budget limit to plan against"
        return
    tp.steps = steps
    tp.evals = count_evals(c, steps)
    every = c.eval.every_steps
    tp.eval_interval_s = every * tp.step_s
    if tp.eval_blocks_training or tp.device.startswith("CPU"):  # CPU: one GIL, taking turns
        eval_cost = tp.eval_s
    else:  # beside training on the engines: only what the window's slack does not absorb
        eval_cost = max(0.0, every * (tp.generation_s or 0.0) + tp.eval_s - every * tp.step_s)
    tp.checkpoints = steps // c.checkpoint.every_steps + tp.evals
    run_s = steps * tp.step_s + tp.evals * eval_cost + tp.checkpoints * tp.checkpoint_s
    start = JOB_START_S_GPU if shape.gpus_per_node else JOB_START_S_CPU
    _jobs(c, tp, limits, run_s, start)
    if tp.jobs and tp.jobs > 1 and tp.steps_per_job and limits.time_min:
        # Every job but the last runs to its time limit; the last runs what is left.
        left = steps - (tp.jobs - 1) * tp.steps_per_job
        tp.wall_h = ((tp.jobs - 1) * limits.time_min * 60 + start + left * run_s / steps) / 3600
    else:
        tp.wall_h = (run_s + start) / 3600
    tp.gpu_hours = tp.wall_h * (tp.devices or 1)
    _eval_checks(c, tp, limits)


def _jobs(c: TrainConfig, tp: TimePlan, limits: Limits, run_s: float, start: float) -> None:
    """Jobs to the budget under a time limit. A job keeps its work up to its last checkpoint:
    the stop signal (signal_delay_s before the limit) saves the last finished step at once
    (with the generation service) or at the next step boundary (before it), when that save
    fits in the warning; otherwise only the scheduled checkpoints (checkpoint.every_steps /
    every_minutes) survive a requeue."""
    if limits.time_min is None:
        tp.jobs, tp.requeues = 1, 0
        return
    job_s = limits.time_min * 60
    tp.job_h = job_s / 3600
    tp.max_requeues = limits.max_requeues
    steps = tp.steps or 0
    per_step = run_s / max(steps, 1)  # a step with its share of evals and checkpoints
    usable = job_s - start - (limits.signal_delay_s or 0)
    fit = int(max(0.0, usable) // per_step)
    warning = limits.signal_delay_s
    ckpt = tp.checkpoint_s or 0.0
    margin = stop_margin_s(warning or 0.0)
    at_once = stop_saves_at_once(c)
    need = ckpt + margin if at_once else tp.step_s + ckpt
    if warning is not None and warning < need and at_once:
        every = c.checkpoint.every_steps
        tp.warnings.append(
            f"signal_delay_s {warning:g} is less than a checkpoint ({_dur(ckpt)}) plus "
            f"{margin:.0f} s (the requeue's hold-back, the stop reaching a decode step): the "
            "save of the last finished step may not finish before the job requeues, so a "
            "requeue can lose the work since the last scheduled checkpoint; raise "
            f"slurm.signal_delay_s to {math.ceil((ckpt + STOP_REACH_S) * 1.5) + 60}")
        fit = (fit // every) * every
    elif warning is not None and warning < need:
        every = c.checkpoint.every_steps
        sched = f"checkpoint.every_steps {every}"
        if c.checkpoint.every_minutes:
            every = min(every, max(1, int(c.checkpoint.every_minutes * 60 // per_step)))
            sched += f", every_minutes {c.checkpoint.every_minutes:g}"
        tp.warnings.append(
            f"signal_delay_s {warning:g} is less than a step plus a checkpoint "
            f"({_dur(tp.step_s + ckpt)}): the stop signal cannot save at a step boundary, so "
            f"every requeue loses the work since the last scheduled checkpoint ({sched}); "
            f"raise slurm.signal_delay_s to {math.ceil((tp.step_s + ckpt) * 1.2)}")
        fit = (fit // every) * every
    tp.steps_per_job = fit
    if fit <= 0:
        tp.jobs = None
        tp.reaches_budget = False
        tp.problem = (f"a job of {_dur(job_s)} keeps no step: a step with its share of evals "
                      f"and checkpoints takes {_dur(per_step)} after a {_dur(start)} start, and "
                      f"checkpoints come every {c.checkpoint.every_steps} steps; set "
                      "checkpoint.every_minutes below the job's length, raise "
                      "slurm.signal_delay_s above a step plus a checkpoint, or raise "
                      f"{limits.time_key}")
        return
    tp.jobs = math.ceil(steps / fit)
    tp.requeues = tp.jobs - 1
    tp.max_num_timeout = (auto_max_num_timeout(tp.requeues) if limits.auto_requeues
                          else limits.max_requeues)
    if limits.max_requeues is not None and tp.requeues > limits.max_requeues:
        tp.reaches_budget = False
        reach = (limits.max_requeues + 1) * fit
        raise_ = (f"raise {limits.requeue_key} to {tp.requeues} (or set it to auto) or "
                  f"{limits.time_key}"
                  if limits.requeue_key else f"raise {limits.time_key}")
        tp.problem = (f"needs {tp.jobs} jobs of {_dur(job_s)} ({tp.requeues} requeues) to reach "
                      f"{steps:,} steps, the profile allows {limits.max_requeues} requeues "
                      f"({limits.requeue_key or 'the executor default'}), which stop it near "
                      f"step {reach:,}; {raise_}, or lower the budget")
    else:
        tp.reaches_budget = True


def _eval_checks(c: TrainConfig, tp: TimePlan, limits: Limits) -> None:
    """An eval that cannot finish where it runs: inside a job, or behind the training ranks'
    barrier (engine.collective_timeout_minutes); or not before the next eval is due. An eval
    that cannot finish comes first in `problem`: nothing after step 0 happens without it."""
    ev = tp.eval_s or 0.0
    n = c.eval.num_prompts or c.task.num_eval_prompts
    gpu = "CPU" not in tp.device
    start = JOB_START_S_GPU if gpu else JOB_START_S_CPU
    job_s = limits.time_min * 60 if limits.time_min else None
    barrier = c.engine.collective_timeout_minutes * 60
    found = []
    usable = job_s - start - (limits.signal_delay_s or 0) if job_s is not None else None
    if usable is not None and ev > usable and tp.eval_blocks_training:
        found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)}, longer than a {_dur(job_s)} "
                     f"job: the step-0 eval never finishes; lower eval.num_prompts (about "
                     f"{_fewer(n, usable / 2, ev)} evaluate in half a job) or "
                     f"eval.samples_per_prompt, or raise {limits.time_key}")
    elif usable is not None and ev > usable:
        # Beside training, an eval keeps its finished chunks at each requeue (trainer/
        # checkpointing.py, EvalJob.done): it ends after ceil(eval / usable) jobs of progress.
        # It fails only when the next eval is due before it ends: evals would pile up.
        tp.eval_jobs = math.ceil(ev / max(usable, 1.0))
        if tp.eval_interval_s is not None and ev > tp.eval_interval_s:
            found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)} ({tp.eval_jobs} jobs of "
                         f"{_dur(job_s)}), longer than the {_dur(tp.eval_interval_s)} between "
                         f"evals (eval.every_steps {c.eval.every_steps}): evals pile up and the "
                         f"run never catches up; lower eval.num_prompts (about "
                         f"{_fewer(n, tp.eval_interval_s / 2, ev)} evaluate in half that) or "
                         "eval.samples_per_prompt, or raise eval.every_steps")
        else:
            tp.warnings.append(f"one eval takes {_dur(ev)}, longer than a {_dur(job_s)} job: "
                               f"its finished chunks are kept at each requeue, so it ends over "
                               f"{tp.eval_jobs} jobs beside training (each requeue redoes at "
                               "most the chunks in flight)")
    if tp.eval_blocks_training and ev > barrier and (tp.devices or 1) > 1 and gpu \
            and c.rollout.backend == "vllm":
        found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)} while the other training ranks "
                     f"wait at a barrier of {_dur(barrier)} (engine.collective_timeout_minutes): "
                     f"the job fails at its step-0 eval; lower eval.num_prompts (about "
                     f"{_fewer(n, barrier / 2, ev)} evaluate in half that) or raise "
                     "engine.collective_timeout_minutes")
    if found:
        tp.reaches_budget = False
        tp.problem = found[0]
    if not tp.eval_blocks_training and tp.eval_interval_s and ev > tp.eval_interval_s \
            and not tp.eval_jobs:
        tp.warnings.append(f"an eval takes {_dur(ev)}, longer than the {_dur(tp.eval_interval_s)} "
                           f"between evals (eval.every_steps {c.eval.every_steps}): evals queue up")
    if tp.eval_blocks_training and tp.evals and tp.wall_h:
        share = tp.evals * ev / 3600 / tp.wall_h
        if share > 0.2:
            tp.warnings.append(f"evals stop training for {share:.0%} of the wall time "
                               f"({tp.evals} evals of {_dur(ev)})")


def _fewer(n: int, room_s: float, eval_s: float) -> str:
    """Eval prompts that would take `room_s` (an eval's time is about linear in them)."""
    return f"{max(1, int(n * room_s / eval_s)):,}"


def _eval_size(c: TrainConfig) -> str:
    n = c.eval.num_prompts or c.task.num_eval_prompts
    return f"{n:,} prompts x {c.eval.samples_per_prompt}"


def _dur(s: float) -> str:
    """Seconds as the unit a person reads: 45 s, 12 min, 3.4 h."""
    if s < 120:
        return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def dur(s: Optional[float]) -> str:
    return "" if s is None else _dur(s)
