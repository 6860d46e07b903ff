"""YAML sections `rollout:` (+ `rollout.vllm:`) and `length:`: how samples are generated, the
rollout backend and its vLLM settings, and length control."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, PositiveInt, model_validator

from trainer.algo.length import CONTROLS
from trainer.config_parts.base import Strict
from trainer.torch_axes import BACKENDS

# The allowed names are the registries' (torch-free): a length control registered in
# trainer/algo/length.py, a backend in trainer/torch_axes.py is valid here, in the order
# registered.
LengthControl = Literal[tuple(CONTROLS.names())]  # type: ignore[valid-type]
RolloutBackend = Literal[tuple(BACKENDS.names())]  # type: ignore[valid-type]


class VLLMConfig(Strict):
    """Settings of the vllm rollout backend (ignored by hf). Not part of what a run learns,
    but they are part of the resolved config like every other knob."""

    enforce_eager: Optional[bool] = Field(
        None, description="Run vLLM without CUDA graphs: start-up is seconds instead of a "
        "graph capture per batch size, decoding slower. None = eager on CPU only, CUDA graphs "
        "on GPUs.",
    )
    gpu_memory_utilization: Optional[float] = Field(
        None, gt=0, le=1,
        description="Share of its GPU's memory vLLM may take (weights + KV cache). None = 0.9 "
        "on generation GPUs of its own, 0.3 when it shares the one GPU with the trainer.",
    )
    generation_gpus: Union[Literal["auto"], PositiveInt, None] = Field(
        "auto",
        description="Pipeline mode on a multi-GPU node: how many of the node's GPUs run vLLM "
        "(the rest train, one rank each). 'auto' = the split whose planned step is shortest "
        "with the training (and engine) memory fitting: the dry run's time and memory plans "
        "for every split, the same function at the trainer's start "
        "(trainer/plan/split_choice.py); the dry run shows the choice and its neighbours. "
        "A number wins over the plan. None = half, rounded down (the layout before 'auto'). "
        "A one-GPU node is always shared.",
    )
    generation_nodes: Optional[PositiveInt] = Field(
        None,
        description="Node roles (vLLM on several nodes): this many whole nodes run only vLLM "
        "engines and the job's other nodes only train, one rank per GPU (the paper's 64/16 "
        "GPUs as 8 generation + 2 training nodes), instead of every node split alike by "
        "generation_gpus. None = no roles set: generation_gpus decides, and its 'auto' "
        "weighs the role layouts too (trainer/plan/split_choice.py). Training's collectives "
        "then stay on the training nodes, the weight push crosses the network.",
    )
    tensor_parallel_size: Optional[int] = Field(
        None, gt=0,
        description="GPUs per vLLM replica (tensor parallel, inside one node); it must divide "
        "generation_gpus. None = the smallest divisor of the node's generation GPUs whose "
        "engine holds the model's weights (generation dtype), the CUDA context and the KV "
        "cache of one full-length sequence (vLLM's start-up minimum) within "
        "gpu_memory_utilization of a GPU: an 8B model on 80 GiB GPUs gets 1, so four one-GPU "
        "replicas on 4 generation GPUs; a model too large for one GPU gets 2 or 4. Why: when "
        "the model fits, replicas share nothing while decoding, where tensor parallelism "
        "all-reduces twice per layer per step; but each replica holds a whole weight copy, "
        "so at long contexts TP leaves more KV room (the dry run's time plan shows both). The "
        "GPU size is the launch profile's gpu_memory_gib in the plan and nvidia-smi's (or "
        "ABLATE_GPU_MEMORY_GIB) at start; unknown: one replica over all generation GPUs. "
        "trainer/plan/engine_fit.py tensor_parallel chooses it for both.",
    )
    client: Literal["auto", "trainer", "process"] = Field(
        "auto",
        description="Where the engines' client runs: the vLLM clients (their output threads and "
        "output processing), the stream's drivers that deal every sample and route its tokens, "
        "and the eval's streams. 'trainer' = in the training rank that starts the engines "
        "(every node's local rank 0); 'process' = an engine host process that rank spawns "
        "(trainer/generation/host.py): requests and results cross a local connection, the "
        "weight push stays a broadcast from the trainer's module. Why: in the rank, their CPU "
        "and GIL time delays its update and every rank waits for it at the next collective "
        "(measured on CPU: 6.2-42% of rank 0's update time, benchmarks/RESULTS.md); "
        "PipelineRL's actors, prime-rl's orchestrator and verl's rollout workers keep them "
        "out of the trainer too. 'auto' = 'process' where the engines have GPUs of their own, "
        "'trainer' on CPU and on a GPU the engines share (a host would only add its start-up).",
    )
    data_parallel_replicas: Optional[int] = Field(
        None, gt=0,
        description="vLLM engines (data-parallel replicas, each tensor_parallel_size GPUs, each "
        "its own process) that serve one job's generation and eval: a call's prompt groups are "
        "dealt to them by tokens, results merged in order, weights pushed to all. They run on "
        "each node (pipeline mode: every node's local rank 0 starts its node's and generates its "
        "share of each step; eval uses rank 0's node's): at most a node's generation GPUs / "
        "tensor_parallel_size. None = that many on GPUs, 1 on CPU.",
    )


class RolloutConfig(Strict):
    backend: RolloutBackend = Field(
        "hf", description="'hf': transformers generate (any device); 'vllm': vLLM engine."
    )
    prompts_per_step: int = Field(48, gt=0, description="Prompts per step (ScaleRL: 48).")
    generations_per_prompt: int = Field(
        16, gt=1, description="Samples per prompt, G (ScaleRL: 16 -> 768 completions/step)."
    )
    max_new_tokens: int = Field(
        12288, gt=0, description="Hard cap on generated tokens per sample (thinking + answer)."
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (ScaleRL: 1.0).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling (1.0 = off).")
    async_timing: Optional[Literal["data", "wall"]] = Field(
        None,
        description="off_policy.mode pipeline only: what decides where the generator's weights "
        "change. 'data' (reproducible; the CPU proxy's): every generate call is fixed in "
        "advance by the stream's position (which prompt groups, which seed, which weight "
        "version: the oldest the k bound allows, so a step's groups start with the weights "
        "of k steps before), and the in-flight (mid-sequence) pushes land at decode steps "
        "fixed by the data (rollout.inflight_switch_tokens); the generator waits for a "
        "version the trainer has not pushed yet, the trainer never waits to push (the "
        "generator keeps a copy per version). Same config and seed -> identical metrics apart from the "
        "time columns, under any machine load, and a resumed run matches an uninterrupted one "
        "(the stream's unconsumed groups are checkpointed). hf backend only. 'wall' "
        "(throughput, real clusters): the free-running PipelineRL generator: it starts a "
        "group as soon as the k bound admits it, with whatever weights have arrived, and a "
        "push lands between decode steps, mid-sequence, whenever the trainer sends it; lag "
        "is then usually below k when generation is the slower side, but which tokens see "
        "which weights depends on timing, so runs do not replay and a resume restarts the "
        "stream. Both log per-token versions (pipeline/lag_mean, lag_max <= k). None = 'data' "
        "with the hf backend, 'wall' with vllm. ppo_off_policy is reproducible in any case.",
    )
    inflight_switch_tokens: Optional[int] = Field(
        None, ge=0,
        description="async_timing data only: PipelineRL's in-flight weight update (Piche et "
        "al. 2025, PipelineRL), placed by the data instead of the clock. A generate call "
        "starts with the oldest weights the k bound allows and moves to the next version "
        "every this many decode steps (token d of the call is sampled by version "
        "start + d // this), up to the version its first prompt group is trained with; each "
        "token records the version that sampled it. It stands for the trainer's step time "
        "measured in decode steps: smaller -> fresher later tokens (lower lag_mean), but the "
        "generator waits more often for a push. 0 = weights change only between calls. "
        "None = max_new_tokens // (off_policy.k + 1), so a full-length call can cross k "
        "versions. Ignored by async_timing wall (its pushes land whenever they arrive).",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)

    @model_validator(mode="after")
    def _data_timing_needs_hf(self) -> "RolloutConfig":
        if self.async_timing == "data" and self.backend != "hf":
            raise ValueError(
                f"rollout.async_timing=data needs rollout.backend hf (got {self.backend}): a "
                "vllm engine also serves eval, whose weight pushes land between the scheduled "
                "calls; use rollout.async_timing: wall (or leave it unset)")
        return self

    @property
    def timing(self) -> str:
        """async_timing as it applies: unset means data with hf, wall with vllm."""
        return self.async_timing or ("data" if self.backend == "hf" else "wall")


class LengthConfig(Strict):
    """Length control (ScaleRL: forced interruption; alternative: DAPO overlong penalty)."""

    control: LengthControl = Field(
        "interrupt", description="How over-long generations are handled."
    )
    thinking_budget: int = Field(
        12288, gt=0, description="interrupt: thinking tokens before the interruption text."
    )
    budget_min_fraction: float = Field(
        10 / 12, gt=0, le=1,
        description="interrupt: per-sample budget drawn uniformly in [fraction*budget, budget] "
        "(paper: 10k-12k for a 12k budget).",
    )
    answer_budget: int = Field(
        2048, gt=0, description="interrupt: tokens allowed for the answer after interruption."
    )
    interrupt_text: str = Field(
        "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>",
        description="interrupt: text appended when the budget is hit (paper's wording).",
    )
    think_end: str = Field(
        "</think>",
        description="interrupt: the marker that closes thinking; a sample that wrote it within "
        "its drawn budget is not interrupted, and its answer budget counts from it.",
    )
    overlong_max: int = Field(
        12288, gt=0, description="overlong_penalty: L_max in clip((L_max-|y|)/L_cache - 1, -1, 0)."
    )
    overlong_cache: int = Field(
        2048, gt=0, description="overlong_penalty: L_cache, the soft-penalty window."
    )
