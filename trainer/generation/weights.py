"""The weights the hf sampler multiplies by (trainer/generation/sampler.py): the training module
itself, or on CUDA with a bf16 body a private copy whose matmul weights are bf16, refreshed in
place at each weight push; its LM heads; and a grouped-query decode attention for that copy.

Why a module of its own: how the generator's numerics relate to the trainer's (what is rounded
when, what is shared) is one question, apart from the decode loop's control flow.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from trainer.models.precision import DTYPES, LMHead, autocast


class GenerationWeights:
    """What the sampler multiplies by: the source module itself, or (CUDA, bf16 body) a private
    module whose matmul weights (every nn.Linear but the LM head) are held in bf16, refreshed
    in place from the source by `refresh()`.

    Same numerics as the previous path (bf16 autocast over the fp32 master weights): autocast
    rounds each fp32 weight to bf16 before every matmul, i.e. every token; here that rounding
    happens once per weight push, and autocast finds the weights already in bf16 (no cast).
    Everything else (embedding, norms, rotary buffers) is the source's own fp32 tensor, shared,
    not copied: the residual stream stays fp32 as under autocast (an all-bf16 model drifts
    ~40x further from the trainer's log-probs on the tests' tiny model). The fp32 LM head reads
    the source's fp32 weight; the bf16 head (ScaleRL's mismatch) a bf16 copy of it. In place,
    so captured graphs keep reading the same addresses. ZeRO-3 partitioned weights are never
    copied (each forward gathers them), so they keep reading the source."""

    def __init__(self, model: nn.Module, dtype: str, lm_head_fp32: bool, device: torch.device,
                 partitioned: bool, cast: bool | None = None) -> None:
        self.source, self.dtype = model, dtype
        if cast is None:  # CPU keeps the source: the proxy runs fp32, and CPU bf16 is a test path
            cast = device.type == "cuda"
        self.cast = cast and dtype != "fp32" and not partitioned
        self.context = lambda: autocast(device, dtype)
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (bf16 copy, fp32 source)
        src_head = model.get_output_embeddings()
        if not self.cast:
            self.model = model
            self.head: nn.Module = LMHead(src_head, lm_head_fp32)
        else:
            self.model = self._copy(model, src_head.weight, DTYPES[dtype])
            if lm_head_fp32:
                self.head = _Fp32Head(src_head)
            else:
                w = src_head.weight.detach().to(DTYPES[dtype])
                self.pairs.append((w, src_head.weight))
                self.head = _CastHead(w)
        self.body = self.model.get_decoder()  # looked up once: get_decoder() walks modules

    def _copy(self, model: nn.Module, head_w: torch.Tensor, dt: torch.dtype) -> nn.Module:
        """deepcopy with every parameter pre-mapped: Linear weights to new bf16 tensors, the
        rest to the source's own tensors (shared); no transient fp32 duplicate."""
        memo: dict[int, object] = {id(p): p for p in model.parameters()}
        for m in model.modules():
            if isinstance(m, nn.Linear):
                for p in m.parameters(recurse=False):
                    if p is not head_w:
                        memo[id(p)] = nn.Parameter(p.detach().to(dt), requires_grad=False)
                        self.pairs.append((memo[id(p)], p))
        out = copy.deepcopy(model, memo).eval()
        if getattr(out.config, "_attn_implementation", None) == "sdpa":
            _use_gqa_decode(out)
        return out

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-read the source's weights (after a push or an optimizer step); no-op uncast."""
        for dst, src in self.pairs:
            dst.copy_(src)


def gqa_decode_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                         value: torch.Tensor, attention_mask: torch.Tensor | None,
                         scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention for one query token against a grouped-query KV cache, reading the cache once.

    Why: transformers' sdpa path repeats the KV heads to the query heads (`repeat_kv`, a copy)
    whenever a mask is given, at every layer of every decode step: with Qwen2.5-0.5B's 14 query
    / 2 KV heads that is 7x the whole static cache written and read per step, more bytes than
    the weights. Grouping the queries instead ([B, kv, q/kv, d] @ keys) needs no copy. Prefill
    and training calls (more than one query) go to the sdpa path unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      scaling=scaling, **kwargs)
    B, Hq, _, d = query.shape
    Hkv, L = key.shape[1], key.shape[2]
    # The query heads sharing a KV head become that head's "query tokens": one sdpa call over
    # Hkv heads, each with Hq/Hkv queries that all see the same (broadcast) mask row.
    q = query.reshape(B, Hkv, Hq // Hkv, d)
    m = None if attention_mask is None else attention_mask[:, :, -1:, :L]
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=m, scale=scaling)
    return out.reshape(B, Hq, 1, d).transpose(1, 2), None


def _use_gqa_decode(model: nn.Module) -> None:
    """Route the (private) generation copy's attention through gqa_decode_attention."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register("ablate_gqa_decode", gqa_decode_attention)
    # Masks are built per attention implementation: an unregistered name gets no causal mask.
    AttentionMaskInterface.register("ablate_gqa_decode", sdpa_mask)
    model.set_attn_implementation("ablate_gqa_decode")


class _Fp32Head(nn.Module):
    """LM head in fp32 from the master weight, whatever the body's dtype."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.w = head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            b = None if self.w.bias is None else self.w.bias.float()
            return F.linear(h.float(), self.w.weight.float(), b)


class _CastHead(nn.Module):
    """LM head from a bf16 copy of its weight (the ScaleRL mismatch), logits returned in fp32."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.w = weight

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            return F.linear(h.to(self.w.dtype), self.w).float()
