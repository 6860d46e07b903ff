"""trainer/models/precision.py LMHead: the fp32 LM head at tensor-core speed. On GPUs with a bf16 body
its GEMM reads bf16 operands split into high and low parts (fp32 accumulation, fp32 logits);
these tests run the same numbers on CPU (bf16 values are exact in fp32) against the all-fp32
head, the one the trainer used so far and CPU runs still use."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.models.precision import LMHead, head_operands


def _case(d: int = 512, vocab: int = 4096, rows: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(d, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, d, generator=g) * 0.02)
    h = torch.randn(rows, d, generator=g)
    h[:, :8] *= 20  # outlier channels, as real LMs' final hidden states have
    return head, h


def test_the_choice_is_explicit():
    assert head_operands("cuda", body_bf16=True) == "bf16x3"
    assert head_operands("cuda", body_bf16=False) == "fp32"  # an fp32 run stays fp32
    assert head_operands("cpu", body_bf16=True) == "fp32"
    assert head_operands("cpu", True, "bf16") == "bf16"
    with pytest.raises(ValueError, match="valid: auto, fp32, bf16x3, bf16"):
        head_operands("cuda", True, "fp16")


def test_cpu_default_is_todays_fp32_head_exactly():
    head, h = _case()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = LMHead(head, True)(h)
    assert out.dtype == torch.float32
    assert torch.equal(out, F.linear(h, head.weight))


def test_split_bf16_logits_equal_fp32_within_tolerance():
    """bf16x3 (the GPU default) stays within 5e-4 of the fp32 head in logits and log-probs;
    one bf16 pass is ~100x further off (its operand rounding alone)."""
    head, h = _case()
    ref = LMHead(head, True, "fp32")(h)
    split = LMHead(head, True, "bf16x3")(h)
    single = LMHead(head, True, "bf16")(h)
    assert split.dtype == single.dtype == torch.float32
    err_split = (split - ref).abs().max().item()
    err_single = (single - ref).abs().max().item()
    lp = (torch.log_softmax(split, -1) - torch.log_softmax(ref, -1)).abs().max().item()
    assert err_split < 5e-4 and lp < 5e-4, (err_split, lp)
    assert err_single > 20 * err_split, (err_single, err_split)


def test_bf16_inputs_are_exact():
    """DeepSpeed's bf16 module: hidden state and head weight are bf16 already, so one GEMM of
    them with fp32 accumulation is the fp32 head on the same values."""
    head, h = _case()
    head = head.to(torch.bfloat16)
    hb = h.to(torch.bfloat16)
    out = LMHead(head, True, "bf16x3")(hb)
    ref = F.linear(hb.float(), head.weight.float())
    assert torch.allclose(out, ref, atol=1e-5, rtol=0)


def test_gradients_follow_the_fp32_head():
    head, h = _case(d=256, vocab=1024, rows=16)
    target = torch.randint(0, 1024, (16,), generator=torch.Generator().manual_seed(1))
    grads = {}
    for mode in ("fp32", "bf16x3"):
        head.weight.grad = None
        x = h.clone().requires_grad_(True)
        F.cross_entropy(LMHead(head, True, mode)(x), target).backward()
        grads[mode] = (x.grad.clone(), head.weight.grad.clone())
    for ref, got in zip(grads["fp32"], grads["bf16x3"]):
        rel = ((got - ref).norm() / ref.norm()).item()
        assert rel < 1e-2, rel  # one bf16 pass per gradient, fp32 accumulation
        assert got.dtype == torch.float32
