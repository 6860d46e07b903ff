"""The hf backend's decode loop: a preallocated static KV cache and a capturable decode step.

Why not the previous loop (kept below as `DynamicSampler`, the correctness oracle and the
benchmarks' baseline): on a GPU an RL step was generation-bound at ~30 ms per decode step for
64 rows, where reading the weights takes ~0.3 ms. The costs were (1) eager decoding, one Python
round trip per layer per token; (2) autocast re-casting the fp32 master weights to bf16 at
every decode step; (3) a host sync per token for the EOS check; (4) transformers' DynamicCache
growing by concatenation, i.e. copying the whole cache every token (quadratic in length).

`StaticSampler` answers each: (1) on CUDA the decode step (body + head, fixed shapes) runs under
torch.compile(mode="reduce-overhead"), i.e. CUDA graphs; prefill stays eager (one call, and
compiling variable prompt lengths would recompile); on CPU everything is eager (graphs are a
CUDA feature and compile time would dwarf the proxy's seconds of generation). (2) On CUDA with
a bf16 body the weights are held in bf16 in a private copy, refreshed in place at each weight
push (`refresh`), never re-cast per token; the LM head reads the fp32 master weight directly
when `precision.generator_lm_head_fp32`. (3) EOS is tracked on device; the host looks at it
only every `check_every` steps (1 on CPU, where reading a CPU tensor costs no sync). (4) The
KV cache is transformers' StaticCache, allocated once per (rows, length) and reused across
calls, written in place (index_copy_), so time per token stays flat with length.

Both samplers share one interface, `decode(...) -> Decoded`, so `HFGenerator` (rollout.py)
owns prompts, weights pushes and versions, and delegates only the loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from trainer.dist.groups import on_all_ranks
from trainer.generation.weights import GenerationWeights
from trainer.models.precision import DTYPES, LMHead, autocast

# Cache lengths are rounded up to this on CUDA so that prompt lengths varying from step to step
# reuse one captured graph (a graph is specialised to its shapes) instead of recompiling.
CUDA_LENGTH_BUCKET = 256
# Host looks at the EOS flags once per this many decode steps on CUDA: up to this many wasted
# steps after the last sample stops, against one device->host sync per token otherwise.
CUDA_CHECK_EVERY = 16


@dataclass
class Decoded:
    """Raw output of one decode loop over B rows (what HFGenerator turns into a Generation)."""

    tokens: torch.Tensor  # [B, steps] sampled ids (rows that stopped keep sampling: cut by length)
    logprobs: torch.Tensor  # [B, steps] fp32 log-prob of each sampled id
    versions: list[int]  # policy version in force at each step
    length: torch.Tensor  # [B] tokens up to and including EOS, or steps when none
    done: torch.Tensor  # [B] stopped by EOS


Between = Callable[[], None]  # called between decode steps: applies in-flight weight pushes
Version = Callable[[], int]  # the policy version in force now


def sample(logp: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    """One id per row from log-probs [B, V] (nucleus-truncated when top_p < 1)."""
    probs = logp.exp()
    if top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        keep = sp.cumsum(-1) - sp < top_p  # always keeps the top token
        probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


class _Loop:
    """Per-token bookkeeping shared by both samplers: outputs, versions, EOS on device."""

    def __init__(self, B: int, T: int, eos: int, device: torch.device) -> None:
        self.tok = torch.empty((B, T), dtype=torch.long, device=device)
        self.lp = torch.empty((B, T), dtype=torch.float32, device=device)
        self.versions: list[int] = []
        self.done = torch.zeros(B, dtype=torch.bool, device=device)
        self.length = torch.full((B,), T, dtype=torch.long, device=device)
        self.eos, self.steps = eos, 0

    def record(self, t: int, logits: torch.Tensor, temperature: float, top_p: float,
               gen: torch.Generator, version: int) -> torch.Tensor:
        logp = torch.log_softmax(logits / temperature, -1)
        tok = sample(logp, top_p, gen)
        self.tok[:, t] = tok
        self.lp[:, t] = logp.gather(-1, tok[:, None]).squeeze(-1)
        self.versions.append(version)
        self.steps = t + 1
        newly = (tok == self.eos) & ~self.done
        self.length = torch.where(newly, t + 1, self.length)
        self.done |= newly
        return tok

    def all_done(self, synced: bool) -> bool:
        stop = bool(self.done.all())  # the host sync: callers decide how often
        return on_all_ranks(stop, self.done.device) if synced else stop

    def result(self) -> Decoded:
        s = self.steps
        return Decoded(self.tok[:, :s], self.lp[:, :s], self.versions, self.length, self.done)


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) [B, P], prompts right-aligned so every row decodes at column P."""
    B, P = len(rows), max(len(p) for p in rows)
    ids = torch.full((B, P), pad, dtype=torch.long)
    attn = torch.zeros((B, P), dtype=torch.long)
    for i, p in enumerate(rows):
        ids[i, P - len(p):] = torch.tensor(p)
        attn[i, P - len(p):] = 1
    return ids, attn


def _kv_cache(config, length: int, dtype: torch.dtype):
    """transformers' StaticCache holding keys and values in `dtype`. Under bf16 autocast the
    keys leave the rotary embedding in fp32 and the values leave their projection in bf16; a
    static layer allocates both in the first key's dtype and then refuses the other, so both
    are stored in the compute dtype (attention reads them in it anyway: sdpa is a bf16 op
    under autocast)."""
    from transformers import StaticCache

    class Cache(StaticCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(key_states.to(dtype), value_states.to(dtype), layer_idx,
                                  *args, **kwargs)

    return Cache(config=config, max_cache_len=length)


class StaticSampler:
    """Static-cache decode loop (see the module docstring for what it fixes and why)."""

    def __init__(self, model: nn.Module, *, dtype: str, lm_head_fp32: bool,
                 device: torch.device, synced: bool = False, capture: bool | None = None,
                 cast: bool | None = None) -> None:
        self.weights = GenerationWeights(model, dtype, lm_head_fp32, device, synced, cast)
        self.device, self.synced = device, synced
        if capture is None:  # ABLATE_SAMPLER_CAPTURE=0 turns graphs off (debugging a new stack)
            capture = device.type == "cuda" and os.environ.get("ABLATE_SAMPLER_CAPTURE", "1") != "0"
        self.capture = capture and not synced  # ZeRO-3 gathers inside forward: not capturable
        self.check_every = CUDA_CHECK_EVERY if device.type == "cuda" else 1
        self._cache = None  # (key, StaticCache), reused while rows and length stay the same
        self._step = torch.compile(self._forward, mode="reduce-overhead", dynamic=False) \
            if self.capture else self._forward

    def refresh(self) -> None:
        self.weights.refresh()

    def _forward(self, ids, attn, pos, cache_pos, cache) -> torch.Tensor:
        with self.weights.context():
            h = self.weights.body(input_ids=ids, attention_mask=attn, position_ids=pos,
                                  cache_position=cache_pos, past_key_values=cache,
                                  use_cache=True).last_hidden_state
            return self.weights.head(h[:, -1])

    def cache_for(self, B: int, L: int):
        """The KV cache for B rows of L positions: allocated on first use, reset after."""
        key = (B, L)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, _kv_cache(self.weights.model.config, L, DTYPES[self.weights.dtype]))
        else:
            self._cache[1].reset()
        return self._cache[1]

    @torch.no_grad()
    def decode(self, ids: torch.Tensor, attn: torch.Tensor, *, max_new_tokens: int,
               temperature: float, top_p: float, gen: torch.Generator, eos: int,
               version: Version, between: Between) -> Decoded:
        dev, T = self.device, max_new_tokens
        B, P = ids.shape
        L = P + T
        if self.capture:
            L = -(-L // CUDA_LENGTH_BUCKET) * CUDA_LENGTH_BUCKET
        cache = self.cache_for(B, L)
        attn = attn.to(dev)
        # Decode reads one query row against all L key columns: a ready [B, 1, 1, L] boolean
        # mask (True = attend) is passed as is, so transformers builds no mask per token; it is
        # a view of `keep`, whose columns switch on as they are filled.
        keep = torch.zeros((B, L), dtype=torch.bool, device=dev)
        keep[:, :P] = attn.bool()
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        loop = _Loop(B, T, eos, dev)
        full = torch.zeros((B, L), dtype=torch.long, device=dev)  # prefill: 2D, causal built
        full[:, :P] = attn
        logits = self._forward(ids.to(dev), full, pos, torch.arange(P, device=dev), cache)
        pos, cache_pos = pos[:, -1:].clone(), torch.tensor([P], device=dev)
        for t in range(T):
            tok = loop.record(t, logits, temperature, top_p, gen, version())
            if t + 1 == T or ((t + 1) % self.check_every == 0 and loop.all_done(self.synced)):
                break
            between()  # in-flight weight update between decode steps
            keep[:, P + t] = True
            pos += 1
            if self.capture:
                torch.compiler.cudagraph_mark_step_begin()
            logits = self._step(tok[:, None], keep[:, None, None, :], pos, cache_pos, cache)
            cache_pos += 1
        return loop.result()


# Captured samplers by (model, settings), the last few only: each eval builds a new HFGenerator
# on the trainer's module, and a new sampler would copy the weights and re-capture the decode
# graph (tens of seconds) every time. Holding the model alive is the price; 2 covers the
# generator and eval sharing one module plus one more.
_SHARED: dict[tuple, StaticSampler] = {}
_SHARED_MAX = 2


# On CPU (no graphs), below this many positions (prompt + new tokens) a growing cache is the
# cheaper one: its copying is small there, while the static cache attends over every reserved
# column with an explicit mask (no mask-free fast path). Measured on the proxy's tiny Llama
# (benchmarks/bench_sampler.py): static slower per token over the first 256 of 2,048 tokens,
# twice as fast over the last 256; the proxy's calls have ~10 positions.
CPU_STATIC_FROM = 1024


class CpuSampler:
    """CPU: the static cache for long calls, the growing one for short ones (see above)."""

    def __init__(self, model: nn.Module, **kw) -> None:
        self.static, self.dynamic = StaticSampler(model, **kw), DynamicSampler(model, **kw)

    def refresh(self) -> None:
        self.static.refresh()

    def decode(self, ids: torch.Tensor, attn: torch.Tensor, *, max_new_tokens: int,
               **kw) -> Decoded:
        long = ids.shape[1] + max_new_tokens >= CPU_STATIC_FROM
        return (self.static if long else self.dynamic).decode(ids, attn,
                                                              max_new_tokens=max_new_tokens, **kw)


def static_sampler(model: nn.Module, *, dtype: str, lm_head_fp32: bool, device: torch.device,
                   synced: bool = False) -> StaticSampler | CpuSampler:
    """The hf backend's sampler for `model`: on CPU a CpuSampler (fresh: nothing to keep), on
    CUDA the captured StaticSampler already built for this module and settings if any."""
    if device.type != "cuda":
        return CpuSampler(model, dtype=dtype, lm_head_fp32=lm_head_fp32, device=device,
                          synced=synced)
    key = (id(model), dtype, lm_head_fp32, str(device), synced)
    hit = _SHARED.pop(key, None)
    if hit is None or hit.weights.source is not model:
        hit = StaticSampler(model, dtype=dtype, lm_head_fp32=lm_head_fp32, device=device,
                            synced=synced)
    _SHARED[key] = hit  # most recent last
    while len(_SHARED) > _SHARED_MAX:
        _SHARED.pop(next(iter(_SHARED)))
    return hit


class DynamicSampler:
    """The previous loop, unchanged in substance: DynamicCache grown by concatenation, autocast
    over the fp32 weights, a host sync per token. Kept as the oracle the tests compare
    StaticSampler against and as the benchmarks' 'previous sampler' baseline."""

    def __init__(self, model: nn.Module, *, dtype: str, lm_head_fp32: bool,
                 device: torch.device, synced: bool = False) -> None:
        self.model, self.dtype, self.device, self.synced = model, dtype, device, synced
        self.head = LMHead(model.get_output_embeddings(), lm_head_fp32)

    def refresh(self) -> None:
        pass  # reads the module's weights directly

    @torch.no_grad()
    def decode(self, ids: torch.Tensor, attn: torch.Tensor, *, max_new_tokens: int,
               temperature: float, top_p: float, gen: torch.Generator, eos: int,
               version: Version, between: Between) -> Decoded:
        from transformers import DynamicCache

        dev, body = self.device, self.model.get_decoder()
        ids, attn = ids.to(dev), attn.to(dev)
        B = ids.shape[0]
        padded = bool((attn == 0).any())
        cache, loop = DynamicCache(), _Loop(B, max_new_tokens, eos, dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        x = ids
        for t in range(max_new_tokens):
            kw = {"attention_mask": attn, "position_ids": pos} if padded else {}
            with autocast(dev, self.dtype):
                h = body(input_ids=x, past_key_values=cache, use_cache=True, **kw)
                logits = self.head(h.last_hidden_state[:, -1])
            tok = loop.record(t, logits, temperature, top_p, gen, version())
            if t + 1 == max_new_tokens or loop.all_done(self.synced):
                break
            x = tok[:, None]
            if padded:
                attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=dev)], 1)
                pos = pos[:, -1:] + 1
            between()
        return loop.result()


SAMPLERS = {"static": StaticSampler, "dynamic": DynamicSampler}
