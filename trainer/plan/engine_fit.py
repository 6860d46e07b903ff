"""Whether a vLLM engine of `tp` GPUs holds the model, and the default tensor-parallel size
that follows: the one rule the job's topology (trainer/plan/topology.py) reads, so the dry
run's plan and the trainer's start-up (trainer/dist/binding.py config_binding) share it.

Why a module of its own: both sides must choose the same engines, and the start-up binding
runs before torch or CUDA (pure Python here: no torch, no import of the plan's modules, which
import the binding's). The byte counts the plan prints (trainer/plan/memory.py vllm_terms) are
these same functions.
"""

from __future__ import annotations

from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.model_shape import ModelShape, model_shape, proxy_shape

GIB = 2 ** 30
# Prompt tokens assumed for a real model: the paper's prompt budget (ScaleRL: 2,048 of the
# 16,384-token context). Prompts are data; this bounds them for planning.
PROMPT_TOKENS = 2048
VLLM_UTILIZATION = 0.9  # rollout.vllm.gpu_memory_utilization default on GPUs of its own
CUDA_OVERHEAD_GIB = 1.0  # CUDA context, NCCL buffers, allocator slack, per process


def sequence_tokens(c: TrainConfig) -> int:
    """Longest prompt + completion a sample can reach (trainer/algo/length.py's caps)."""
    if c.length.control == "interrupt":
        think = min(c.length.thinking_budget, c.rollout.max_new_tokens)
        completion = think + 2 * len(c.length.interrupt_text.split()) + c.length.answer_budget
    else:
        completion = c.rollout.max_new_tokens
    if c.model.name_or_path is None:
        return min(c.model.proxy.max_position_embeddings, 64 + completion)
    return PROMPT_TOKENS + completion


def kv_bytes_per_token(c: TrainConfig, m: ModelShape) -> int:
    b = 2 if c.precision.dtype == "bf16" else 4
    return 2 * m.layers * m.kv_heads * m.head_dim * b


def engine_gpu_bytes(c: TrainConfig, m: ModelShape, tp: int) -> tuple[float, float]:
    """(weights, KV cache of one full-length sequence) on each GPU of an engine tensor-parallel
    over `tp` GPUs: the model in the generation dtype (plus the fp32 LM head's extra bytes when
    precision.generator_lm_head_fp32), both split over the tp GPUs."""
    b = 2 if c.precision.dtype == "bf16" else 4
    head_extra = m.vocab * m.hidden * (4 - b) if c.precision.generator_lm_head_fp32 else 0
    return (m.params * b + head_extra) / tp, sequence_tokens(c) * kv_bytes_per_token(c, m) / tp


def kv_room(c: TrainConfig, m: ModelShape, tp: int, gpu_gib: float, util: float) -> int:
    """Full-length sequences whose KV cache fits beside the weights and the CUDA context in
    `util` of each of an engine's `tp` GPUs of `gpu_gib` (trainer/plan/placement.py
    tensor_parallel picks the smallest tp where this is >= 1)."""
    weights, per_seq = engine_gpu_bytes(c, m, tp)
    return int(max(0.0, util * gpu_gib * GIB - weights - CUDA_OVERHEAD_GIB * GIB) // per_seq)


# vLLM 0.32.0's scheduler limits for an engine made by `vllm.LLM` (UsageContext.LLM_CLASS:
# vllm/entrypoints/llm.py:343) that is passed neither max_num_seqs nor max_num_batched_tokens,
# as trainer/generation/vllm_args.py engine_args starts them on GPUs:
# vllm/engine/arg_utils.py:2894-2985 get_batch_defaults picks them by the device's total memory
# (NVML, platforms/cuda.py:801-804) and name: >= 160 GiB, or >= 70 GiB and not an A100 (H100,
# H200): 1,024 sequences and 16,384 tokens a scheduler step; otherwise 256 and 8,192; applied at
# arg_utils.py:3112-3127 when unset (performance_mode "throughput" doubles them, :3130; the
# default is "balanced", vllm/config/vllm.py:433). Where the device cannot be queried vLLM uses
# the last pair, and so does the plan where the GPU size is not known.
LARGE_GPU_LIMITS = (1024, 16384)
OTHER_GPU_LIMITS = (256, 8192)


def scheduler_limits(gpu_gib: Optional[float], gpu_model: Optional[str]) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of one engine on GPUs of `gpu_gib` GiB of model
    `gpu_model` (the profile's gpu_model key, e.g. "a100"; None: not an A100), per the table
    above. max_num_seqs bounds the sequences an engine decodes at once; each of them takes one
    of the step's max_num_batched_tokens, so that bounds them too."""
    if gpu_gib is None:
        return OTHER_GPU_LIMITS
    large = gpu_gib >= 160 or (gpu_gib >= 70 and "a100" not in (gpu_model or "").lower())
    return LARGE_GPU_LIMITS if large else OTHER_GPU_LIMITS


def max_num_seqs(gpu_gib: Optional[float], gpu_model: Optional[str]) -> int:
    """Sequences one engine decodes at once at most (scheduler_limits)."""
    return min(scheduler_limits(gpu_gib, gpu_model))


# The KV room an engine must have beside its weights to be chosen: one full-length sequence.
# It is vLLM's own start-up minimum (vllm/v1/core/kv_cache_utils.py
# _check_enough_kv_cache_memory raises "To serve at least one request with the model's max seq
# len ..." below it), and the plan's "fits" (trainer/plan/memory.py: KV room for 0 sequences
# does not fit); more room only buys concurrency, which replicas also buy.
MIN_KV_SEQUENCES = 1


def tensor_parallel(c: TrainConfig, gen_gpus: int, gpu_gib: Optional[float]) -> Optional[int]:
    """rollout.vllm.tensor_parallel_size, or by default the smallest divisor of the node's
    `gen_gpus` generation GPUs whose engine fits the model: its weights in the generation
    dtype, the CUDA context and MIN_KV_SEQUENCES full-length sequences of KV cache within
    gpu_memory_utilization (0.9 on GPUs of their own) of each GPU of `gpu_gib` (kv_room).
    None: no choice to make here (no generation GPUs, GPU size or model shape unknown: one
    engine over all of them, as before), or no divisor fits (then the largest engine is
    planned and the plan says it does not fit).

    The one statement of the choice: the plan calls it with the launch profile's
    gpu_memory_gib (trainer/plan/topology.py topology), the trainer at start with the
    bound node's GPU size read without CUDA (trainer/dist/binding.py gpu_memory_gib), so both
    choose the same engines.

    Why the smallest: when the model fits one GPU, one-GPU replicas decode more tokens per
    second than one engine tensor-parallel over the same GPUs: tensor parallelism all-reduces
    twice per layer per step (vllm/model_executor/layers/linear.py RowParallelLinear.forward
    -> tensor_model_parallel_all_reduce), replicas share nothing and each decodes its own
    batch (as vLLM's offline data parallelism runs them: one LLM per process,
    vllm/entrypoints/llm.py LLM.__init__ -> examples/features/data_parallel/)."""
    vc = c.rollout.vllm
    if vc.tensor_parallel_size:
        return vc.tensor_parallel_size
    if gen_gpus < 1 or gpu_gib is None:
        return None
    name = c.model.name_or_path
    m = proxy_shape(c) if name is None else model_shape(name)[0]
    if m is None:
        return None
    util = vc.gpu_memory_utilization or VLLM_UTILIZATION
    for tp in (d for d in range(1, gen_gpus + 1) if gen_gpus % d == 0):
        if kv_room(c, m, tp, gpu_gib, util) >= MIN_KV_SEQUENCES:
            return tp
    return None
