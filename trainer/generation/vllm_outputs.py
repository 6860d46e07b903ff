"""What a vLLM engine's outputs and configuration say, read for the generators
(trainer/generation/vllm_engine.py, stream.py): the weights that sampled each token, and the
room an engine has for sequences. A module of its own so that both read it the same way; no
vLLM import (it reads the objects vLLM hands over).
"""

from __future__ import annotations

from trainer.generation.dealing import Room


def sampled_versions(spans, collected: list[int]) -> list[int]:
    """The version of each of a request's output tokens as vLLM stamped it when the engine
    sampled it, from the finished output's weight-version spans (vllm/outputs.py:42-47
    WeightVersionSpan; the engine core labels every step's outputs with the version set last,
    vllm/v1/engine/core.py:647-650, and the output processor turns the labels into spans,
    vllm/v1/engine/output_processor.py:484-498). Why not the version when the output was
    collected: an engine in its own process keeps stepping while the client is busy, so
    outputs sampled before a push can be collected after it. `collected` (what the caller
    recorded) stays where vLLM reported no label (a token sampled before the first push)."""
    out = list(collected)
    for span in spans or ():
        if not str(span.version).lstrip("-").isdigit():
            continue  # vLLM's "default" label: no push labelled these tokens
        for i in range(span.start, min(span.end, len(out))):
            out[i] = int(span.version)
    return out


def engine_room(llm) -> Room:
    """An engine's KV room as its scheduler sees it: cache_config.num_gpu_blocks blocks of
    cache_config.block_size tokens (the client's copy is filled in after the engine core
    sized its cache: vllm/v1/engine/core_client.py:852-860 in an engine process,
    vllm/v1/engine/core.py:340 in process) and scheduler_config.max_num_seqs sequences at
    once (vllm/config/scheduler.py:62). One of those blocks is not room: the block pool takes
    the first free block as its null block at start and never hands it out
    (vllm/v1/core/block_pool.py:184-188; reset_prefix_cache counts it as always used, 838)."""
    vc = llm.llm_engine.vllm_config
    cache = vc.cache_config
    return Room(blocks=max(0, int(cache.num_gpu_blocks or 0) - 1),
                block_size=int(cache.block_size),
                max_seqs=int(vc.scheduler_config.max_num_seqs))


def engine_pid(llm) -> int | None:
    """The pid of an engine's EngineCore process (vllm/v1/engine/core_client.py:494
    BackgroundResources.engine_manager -> vllm/v1/engine/utils.py:273 processes), None when
    the engine runs in this process."""
    core = getattr(llm.llm_engine, "engine_core", None)
    manager = getattr(getattr(core, "resources", None), "engine_manager", None)
    procs = getattr(manager, "processes", None) or ()
    return procs[0].pid if procs else None


def cpus(pid: int) -> str:
    """The CPUs process `pid` (0: this one) may run on, as "count (spans)"."""
    import os

    try:
        got = sorted(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return "unknown"
    spans, start = [], None
    for i, c in enumerate(got):
        if start is None:
            start = c
        if i + 1 == len(got) or got[i + 1] != c + 1:
            spans.append(f"{start}" if start == c else f"{start}-{c}")
            start = None
    return f"{len(got)} ({','.join(spans)})"


def cpu_affinity_line(who: str, llm) -> str:
    """One line for the job log: the CPUs this process (`who`: "rank 0", or the engine host of
    a rank) and its first engine's process may run on (os.sched_getaffinity), so a job given
    too few cores for its engines shows it."""
    import os

    pid = engine_pid(llm)
    engine = "in this process" if pid is None else f"pid {pid} on CPUs {cpus(pid)}"
    return (f"[trainer] CPU affinity: {who} pid {os.getpid()} on CPUs {cpus(0)}; "
            f"engine 0 {engine}")
