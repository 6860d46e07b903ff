"""Rollout backends: something that turns prompts into sampled completions.

The contract other backends plug into (vLLM lives in `trainer.rollout_vllm`):
`Generation` (per-sample tokens, behaviour log-probs, per-token policy versions, finished) and
the `Generator` protocol (generate, sync_weights). Length control, the fp32 head choice for the
trainer, rewards and losses live outside the backends so every backend gets them.

"hf" is a lean sampling loop over any HF causal LM: one prefill, then one forward per token
with a KV cache and no per-token Python beyond sampling (HF generate() pays a lot of per-step
overhead at proxy scale). Weights pushed with `sync_weights` are applied between decode steps,
i.e. in flight, mid-sequence (PipelineRL), and each token records the version that sampled it.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import nn

from trainer.config import TrainConfig
from trainer.distributed import on_all_ranks, world_size
from trainer.precision import LMHead, autocast
from trainer.registry import Registry


@dataclass
class Generation:
    """Completions, prompt-major: prompt i's n samples are at i*n .. i*n+n-1."""

    tokens: list[list[int]]  # completion ids (EOS included when the sample stopped)
    logprobs: list[list[float]]  # behaviour log-prob of each token under the weights that sampled it
    versions: list[list[int]]  # policy version that produced each token
    finished: list[bool]  # True: stopped by EOS; False: hit max_new_tokens


class Generator(Protocol):
    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: int) -> Generation: ...

    def sync_weights(self, model: nn.Module, version: int) -> None: ...


GeneratorFactory = Callable[..., Generator]  # (config, model, tokenizer) -> Generator
BACKENDS: Registry[GeneratorFactory] = Registry("rollout.backend")
BACKENDS.register_lazy("vllm", "trainer.rollout_vllm:make_vllm_generator")


def make_generator(config: TrainConfig, model: nn.Module, tokenizer, *,
                   own_copy: bool = False) -> Generator:
    """The configured backend's generator. `own_copy` (hf only): sample from a private copy
    of the model (pipeline mode), not the trainer's module; vllm always holds its own."""
    if config.rollout.backend == "hf":
        return HFGenerator(config, model, tokenizer, own_copy=own_copy)
    return BACKENDS.get(config.rollout.backend)(config, model, tokenizer)


@BACKENDS.register("hf")
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
        self._lock = threading.Lock()
        # ZeRO-3 partitions the weights: every forward all-gathers them, so all ranks must run
        # the same number of decode steps (transformers' `synced_gpus` idea): a rank whose
        # samples all stopped keeps stepping until every rank's have.
        self.synced = _zero3_partitioned(self.model)

    def sync_weights(self, model: nn.Module, version: int) -> None:
        if model is self.model:
            self.version = version
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
            self.version = pending[1]

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: int) -> Generation:
        from transformers import DynamicCache

        self._apply_pending()
        dev = self.device
        rows = [p for p in prompts for _ in range(n)]
        B, P = len(rows), max(len(p) for p in rows)
        ids = torch.full((B, P), self.pad, dtype=torch.long)
        attn = torch.zeros((B, P), dtype=torch.long)
        for i, p in enumerate(rows):
            ids[i, P - len(p):] = torch.tensor(p)
            attn[i, P - len(p):] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        padded = bool((attn == 0).any())
        gen = torch.Generator(device=dev).manual_seed(seed)
        cache = DynamicCache()
        out_tok = torch.empty((B, max_new_tokens), dtype=torch.long, device=dev)
        out_lp = torch.empty((B, max_new_tokens), dtype=torch.float32, device=dev)
        versions = []
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        length = torch.full((B,), max_new_tokens, dtype=torch.long, device=dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        x, steps = ids, 0
        for t in range(max_new_tokens):
            kw = {"attention_mask": attn, "position_ids": pos} if padded else {}
            with autocast(dev, self.dtype):
                h = self.body(input_ids=x, past_key_values=cache, use_cache=True, **kw)
                logits = self.head(h.last_hidden_state[:, -1]) / temperature
            logp_all = torch.log_softmax(logits, -1)
            tok = _sample(logp_all, top_p, gen)
            out_tok[:, t] = tok
            out_lp[:, t] = logp_all.gather(-1, tok[:, None]).squeeze(-1)
            versions.append(self.version)
            steps = t + 1
            newly = (tok == self.eos) & ~done
            length = torch.where(newly, t + 1, length)
            done |= newly
            stop = bool(done.all())
            if self.synced:
                stop = on_all_ranks(stop, dev)
            if t + 1 == max_new_tokens or stop:
                break
            x = tok[:, None]
            if padded:
                attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=dev)], 1)
                pos = pos[:, -1:] + 1
            self._apply_pending()  # in-flight weight update between decode steps
        lens, toks, lps = length.tolist(), out_tok[:, :steps].tolist(), out_lp[:, :steps].tolist()
        fin = done.tolist()
        return Generation(tokens=[toks[i][: lens[i]] for i in range(B)],
                          logprobs=[lps[i][: lens[i]] for i in range(B)],
                          versions=[versions[: lens[i]] for i in range(B)], finished=fin)


def _sample(logp: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    probs = logp.exp()
    if top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        keep = sp.cumsum(-1) - sp < top_p  # always keeps the top token
        probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


def _zero3_partitioned(model: nn.Module) -> bool:
    return world_size() > 1 and any(hasattr(p, "ds_id") and getattr(p, "ds_numel", 0) != p.numel()
                                    for p in model.parameters())
