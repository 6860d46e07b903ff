"""Compute precision: the fp32 LM head and the body's compute dtype.

ScaleRL's precision fix is the LM head computed in fp32 on both the generator and the trainer
(the log-prob mismatch between them comes mostly from the final projection). The body runs in
`precision.dtype`; the head either in the body dtype or, "fp32", with fp32 logits. This lives
outside the rollout/engine backends so every backend gets the same treatment.

What runs as the fp32 head (LMHead, head_operands):
- GPUs, bf16 body, DeepSpeed (the paper recipe: DeepSpeed's bf16 module holds the head weight
  in bf16, the hidden state is bf16): ONE GEMM of bf16 operands with fp32 accumulation and fp32
  logits (torch.mm(..., out_dtype=torch.float32), aten::mm.dtype, CUDA only in torch 2.13).
  That is exactly vLLM 0.32.0's head with hf_overrides {"head_dtype": "float32"} on CUDA, which
  the generator runs (trainer/generation/vllm_args.py engine_args): vllm/model_executor/layers/
  logits_processor.py:136-173 _apply_head, `torch.mm(flat, lm_head.weight.t(),
  out_dtype=self.head_dtype)` at :170 on the model-dtype (bf16) weight and hidden state. So
  generator and trainer compute the same function of the same bf16 numbers.
- GPUs, bf16 autocast over fp32 weights (the torch engine): the fp32 weight is split into two
  bf16 parts (hi + lo) and the fp32-accumulated cross terms summed ("bf16x3": closer to an fp32
  GEMM than vLLM's head, whose weight is bf16 there too).
- CPU, or an fp32 body: an fp32 GEMM (vLLM's CPU path casts both operands to fp32 too,
  logits_processor.py:174-177).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def autocast(device: torch.device, dtype: str):
    """Body compute context: bf16 autocast, or nothing for fp32."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[dtype])


OPERANDS = ("auto", "fp32", "bf16x3", "bf16")


def head_operands(device_type: str, body_bf16: bool, operands: str = "auto") -> str:
    """How the fp32 head's GEMM reads its operands (fp32 accumulation and fp32 logits in every
    case): "fp32"; "bf16x3": each operand that is fp32 split into a bf16 high part and a bf16
    low part (x = hi + lo, 16 significant bits), hi*hi + hi*lo + lo*hi in bf16 tensor-core
    GEMMs (the dropped lo*lo term is below fp32 rounding of most logits); an operand that is
    bf16 already is not split, so with a bf16 hidden state and a bf16 weight (DeepSpeed bf16,
    the paper recipe) "bf16x3" is one bf16 GEMM with fp32 output: vLLM 0.32's fp32 head on
    CUDA (module doc); "bf16": one bf16 GEMM on the operands rounded to bf16 (8 significant
    bits).
    "auto": "bf16x3" on CUDA when the body runs in bf16 (a bf16 hidden state, or bf16
    autocast): an fp32 x fp32 GEMM gets no tensor cores (H100 SXM: ~67 TFLOP/s fp32 vs ~990
    bf16 dense) and the vocab projection is one of the step's largest GEMMs; "fp32" otherwise
    (CPU, fp32 runs: exact as before). Forcing a mode tests its numerics on CPU (the same
    numbers: _mm_fp32)."""
    if operands not in OPERANDS:
        raise ValueError(f"LMHead operands={operands!r}; valid: {', '.join(OPERANDS)}")
    if operands != "auto":
        return operands
    return "bf16x3" if device_type == "cuda" and body_bf16 else "fp32"


def body_is_bf16(hidden: torch.Tensor) -> bool:
    """The body ran in bf16: a bf16 hidden state (DeepSpeed's bf16 module) or bf16 autocast
    (the torch engine). Asked before the head disables autocast."""
    dev = hidden.device.type
    return hidden.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) == torch.bfloat16)


def _mm_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b of bf16 operands with fp32 accumulation and an fp32 result. CUDA: one cuBLAS
    GEMM on tensor cores (torch.mm's out_dtype, aten::mm.dtype, which has no CPU kernel and no
    autograd formula: hence _SplitBf16), the call vLLM 0.32's fp32 head makes
    (vllm/model_executor/layers/logits_processor.py:170). Elsewhere the same numbers: bf16
    values are exact in fp32, so upcasting and multiplying in fp32 is bf16 operands with fp32
    accumulation."""
    if a.is_cuda:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a.float(), b.float())


def _parts(x: torch.Tensor, split: bool) -> list[torch.Tensor]:
    """x as bf16 parts whose sum is x to 16 bits (one part when x is bf16 already, or unsplit)."""
    hi = x.to(torch.bfloat16)
    if not split or x.dtype == torch.bfloat16:
        return [hi]
    return [hi, (x.float() - hi.float()).to(torch.bfloat16)]


def _split_mm(a: torch.Tensor, b: torch.Tensor, split: bool) -> torch.Tensor:
    """a @ b (2-D) from bf16 parts, fp32 accumulation: the cross terms of order <= 1."""
    pa, pb = _parts(a, split), _parts(b, split)
    out = None
    for i, x in enumerate(pa):
        for j, y in enumerate(pb):
            if i + j <= 1:
                term = _mm_fp32(x, y)
                out = term if out is None else out + term
    return out


class _SplitBf16(torch.autograd.Function):
    """hidden @ weight.T (+ bias) from bf16 operands (split or not), fp32 accumulation, fp32
    logits. Backward: one bf16 pass per gradient (the fp32 logit gradient rounded to bf16, as
    mixed-precision training rounds every gradient), results cast to each input's dtype. Saves
    the inputs themselves (no copies)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, split: bool):
        ctx.save_for_backward(hidden, weight)
        ctx.has_bias = bias is not None
        h = hidden.reshape(-1, hidden.shape[-1])
        out = _split_mm(h, weight.t(), split)
        if bias is not None:
            out = out + bias.float()
        return out.reshape(*hidden.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        hidden, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1]).to(torch.bfloat16)
        dh = dw = db = None
        if ctx.needs_input_grad[0]:
            dh = _mm_fp32(g, weight.to(torch.bfloat16)).reshape(hidden.shape).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            h = hidden.reshape(-1, hidden.shape[-1]).to(torch.bfloat16)
            dw = _mm_fp32(g.t(), h).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = grad.reshape(-1, grad.shape[-1]).float().sum(0)
        return dh, dw, db, None


class LMHead(nn.Module):
    """The final projection with fp32 logits whatever the body dtype when `fp32` is set.

    What runs (`operands`, head_operands; the module doc says it per case): on GPUs with a
    bf16 body the GEMM reads bf16 operands and accumulates and writes fp32, at tensor-core
    speed; under DeepSpeed bf16 (the paper recipe) both operands are bf16 already, so it is one
    bf16 GEMM with fp32 output, as vLLM's fp32 head computes the generator's logits; fp32
    operands (the torch engine's master weights) are split into high and low bf16 parts. The
    bf16 head ScaleRL measured rounded the logits to bf16 too. tests/test_precision_head.py
    bounds each mode's difference to the all-fp32 head; benchmarks/RESULTS.md has the numbers.
    Read against vLLM 0.32.0 and torch 2.13, not run on a GPU here."""

    def __init__(self, head: nn.Linear, fp32: bool, operands: str = "auto") -> None:
        super().__init__()
        self.head, self.fp32, self.operands = head, fp32, operands

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.fp32:
            mode = head_operands(hidden.device.type, body_is_bf16(hidden), self.operands)
            with torch.autocast(device_type=hidden.device.type, enabled=False):
                if mode != "fp32":
                    return _SplitBf16.apply(hidden, self.head.weight, self.head.bias,
                                            mode == "bf16x3")
                w = self.head.weight.float()
                b = None if self.head.bias is None else self.head.bias.float()
                return F.linear(hidden.float(), w, b)
        # Under bf16 autocast this projection runs in bf16: the mismatch ScaleRL measured.
        return self.head(hidden).float()
