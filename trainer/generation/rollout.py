"""Rollout backends: something that turns prompts into sampled completions.

The contract other backends plug into (vLLM lives in `trainer.generation.vllm_engine`) is
trainer/rollouts.py's: `Generation` and the `Generator` protocol (generate, sync_weights);
`Rollout`, a generation with its length control applied (trainer/algo/length.py), is what the
loop trains on. Length control, the fp32 head choice for the trainer, rewards and losses live
outside the backends so every backend gets them. Here: the configured backend's generator (`make_generator`; the
backends are registered by name in trainer/torch_axes.py) and "hf".

"hf" is a lean sampling loop over any HF causal LM: one prefill, then one forward per token with a
KV cache and no per-token Python beyond sampling (HF generate() pays a lot of per-step overhead at
proxy scale). Weights pushed with `sync_weights` are applied between decode steps, i.e. in flight,
mid-sequence (PipelineRL), and each token records the version that sampled it. A `WeightPlan`
(data-timed pipeline, trainer/generation/pipeline_data.py) instead fixes which version samples each
token of a call; the generator loads it at those decode-step boundaries. The decode loop itself is
trainer/generation/sampler.py's (static KV cache, captured decode step on CUDA).
"""

from __future__ import annotations

import copy
import threading
from typing import Callable

import torch
from torch import nn

from trainer.dist import preempt
from trainer.config import TrainConfig
from trainer.dist.groups import world_size
from trainer.models.precision import LMHead
from trainer.torch_axes import BACKENDS
from trainer.rollouts import Generation, Generator, WeightPlan
from trainer.generation.sampler import left_pad, static_sampler




def make_generator(config: TrainConfig, model: nn.Module, tokenizer, *,
                   own_copy: bool = False) -> Generator:
    """The configured backend's generator. `own_copy` (hf only): sample from a private copy
    of the model (pipeline mode), not the trainer's module; vllm always holds its own."""
    if config.rollout.backend == "hf":
        return HFGenerator(config, model, tokenizer, own_copy=own_copy)
    return BACKENDS.get(config.rollout.backend)(config, model, tokenizer)


class HFGenerator:
    """KV-cached sampling loop over an HF causal LM (shared with the trainer or its own copy)."""

    def __init__(self, config: TrainConfig, model: nn.Module, tokenizer, *,
                 own_copy: bool = False) -> None:
        self.model = copy.deepcopy(model).eval() if own_copy else model
        for p in self.model.parameters() if own_copy else ():
            p.requires_grad_(False)
        self.device = next(model.parameters()).device
        self.dtype = config.precision.dtype
        self.head = LMHead(self.model.get_output_embeddings(), config.precision.generator_lm_head_fp32)
        self.body = self.model.get_decoder()
        self.eos = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id
        self.version = 0
        self._pending: tuple[dict, int] | None = None
        self.plan: WeightPlan | None = None  # set by follow(): data-timed weights per token
        self._planned = 0  # tokens sampled so far under the plan (over generate calls)
        self._lock = threading.Lock()
        # ZeRO-3 partitions the weights: every forward all-gathers them, so all ranks must run
        # the same number of decode steps (transformers' `synced_gpus` idea): a rank whose
        # samples all stopped keeps stepping until every rank's have.
        self.synced = _zero3_partitioned(self.model)
        self._own_copy = own_copy
        self.sampler = static_sampler(self.model, dtype=self.dtype, device=self.device,
                                      lm_head_fp32=config.precision.generator_lm_head_fp32,
                                      synced=self.synced)

    def sync_weights(self, model: nn.Module, version: int) -> None:
        if model is self.model:
            self.version = version
            self.sampler.refresh()
            return
        # Snapshot now (trainer thread); the generator applies it at its next decode step.
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self._lock:
            self._pending = (state, version)

    def _apply_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.model.load_state_dict(pending[0])
            self.sampler.refresh()
            self.version = pending[1]

    def _with_stop(self, weights: Callable[[], None]) -> Callable[[], None]:
        """Between decode steps: in-flight weights (`weights`), then a stop signal ends the call
        (trainer/dist/preempt.py; not under ZeRO-3, whose lockstep decode would hang the
        others)."""
        def between() -> None:
            weights()
            if not self.synced:
                preempt.check()
        return between

    def follow(self, plan: WeightPlan | None) -> None:
        """Sample the next rollout's tokens with the weights `plan` names (None: pushes
        apply whenever they arrive, as above). Token counting restarts at 0."""
        if plan is not None and not self._own_copy:
            raise ValueError("a weight plan loads weights into the generator's model: it needs "
                             "own_copy=True (the trainer's module must not be overwritten)")
        self.plan, self._planned = plan, 0

    def _load(self, version: int) -> None:
        self.model.load_state_dict(self.plan.weights(version))  # copies: the snapshot stays
        self.sampler.refresh()
        self.version = version

    def _planned_between(self, start: int) -> Callable[[], None]:
        """between() for a planned call: before token start + m (m = 1, 2, ...) load the
        version the plan names for it if it differs (may block for the trainer's push)."""
        m = 0

        def step() -> None:
            nonlocal m
            m += 1
            v = self.plan.version_at(start + m)
            if v != self.version:
                self._load(v)
        return step

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: int) -> Generation:
        """Prompts and versions here; the decode loop is trainer.generation.sampler's (static KV cache,
        captured decode step on CUDA)."""
        between = self._apply_pending
        if self.plan is not None:  # load even if the label matches: a resumed copy is unlabelled
            start = self._planned
            self._load(self.plan.version_at(start))
            between = self._planned_between(start)
        else:
            self._apply_pending()
        if not self._own_copy:
            self.sampler.refresh()  # the trainer's weights may have moved since the last call
        ids, attn = left_pad([p for p in prompts for _ in range(n)], self.pad)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        d = self.sampler.decode(ids, attn, max_new_tokens=max_new_tokens, temperature=temperature,
                                top_p=top_p, gen=gen, eos=self.eos, version=lambda: self.version,
                                between=self._with_stop(between))
        self._planned += len(d.versions)  # decode iterations: one token position each
        lens, toks, lps, fin = d.length.tolist(), d.tokens.tolist(), d.logprobs.tolist(), d.done.tolist()
        return Generation(tokens=[t[:k] for t, k in zip(toks, lens)],
                          logprobs=[lp[:k] for lp, k in zip(lps, lens)],
                          versions=[d.versions[:k] for k in lens], finished=fin)


def _zero3_partitioned(model: nn.Module) -> bool:
    return world_size() > 1 and any(hasattr(p, "ds_id") and getattr(p, "ds_numel", 0) != p.numel()
                                    for p in model.parameters())
