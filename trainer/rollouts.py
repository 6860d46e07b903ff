"""What generation hands the rest of the trainer: the types every rollout backend, the length
controls, the rewards and the loop share, kept below all of them (and torch-free at import) so
the RL maths (trainer/algo/) and the models need nothing of the generation service.

`Generation` is what one backend call samples (per-sample tokens, behaviour log-probs, per-token
policy versions, finished); `Rollout` is a generation with its length control applied
(trainer/algo/length.py), what the loop trains on; `Generator` is the protocol every backend
implements (the hf sampler and vLLM: trainer/generation/rollout.py, vllm_engine.py);
`WeightPlan` fixes which weights sample each token (the data-timed pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class Generation:
    """Completions, prompt-major: prompt i's n samples are at i*n .. i*n+n-1."""

    tokens: list[list[int]]  # completion ids (EOS included when the sample stopped)
    logprobs: list[list[float]]  # behaviour log-prob of each token under the weights that sampled it
    versions: list[list[int]]  # policy version that produced each token
    finished: list[bool]  # True: stopped by EOS; False: hit max_new_tokens


@dataclass
class Rollout:
    """Samples of one generate call, prompt-major (prompt i's n samples at i*n .. i*n+n-1)."""

    prompts: list[list[int]]  # per sample
    tokens: list[list[int]]
    logprobs: list[list[float]]
    versions: list[list[int]]
    loss_mask: list[list[int]]  # 0 for tokens the policy did not sample (interruption text)
    finished: list[bool]
    interrupted: list[bool] = field(default_factory=list)
    penalty: list[float] = field(default_factory=list)  # added to the reward
    # Tokens the generator ran per sample (prompt prefill + every decoded token), for the
    # generation FLOPs: more than prompt + final tokens when interruption cuts thinking tokens
    # and re-prefills prompt + thinking + interruption text for the answer.
    gen_tokens: list[int] = field(default_factory=list)


class Generator(Protocol):
    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: int) -> Generation: ...

    def sync_weights(self, model: nn.Module, version: int) -> None: ...


class WeightPlan(Protocol):
    """Which weights sample each token of one rollout (data-timed in-flight updates)."""

    def version_at(self, token: int) -> int:
        """Version that samples token `token` (counted over the rollout's generate calls)."""
        ...

    def weights(self, version: int) -> dict[str, torch.Tensor]:
        """That version's state dict; blocks until the trainer has pushed it."""
        ...
