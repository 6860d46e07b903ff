"""The fp32 LM head's operand modes against the all-fp32 head (trainer/models/precision.py LMHead):
logit and log-prob error of split-bf16 operands (the GPU default with a bf16 body), one bf16
pass, and the bf16 head (bf16 logits) ScaleRL's fix replaces. CPU, exact numerics of the GPU
path (bf16 values are exact in fp32). Usage: python benchmarks/bench_lm_head.py [--quick]
(--quick: one small head, a smoke run for CI)"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from trainer.models.precision import LMHead


def main() -> None:
    torch.manual_seed(0)
    print(f"{'hidden':>6} {'vocab':>6}  {'mode':<28} {'max|dlogit|':>11} {'max|dlogp|':>10} "
          f"{'mean|dlogp(top1)|':>17}")
    sizes = ((64, 512),) if "--quick" in sys.argv[1:] else ((896, 32768), (3584, 32768))
    for d, vocab in sizes:
        head = nn.Linear(d, vocab, bias=False)
        nn.init.normal_(head.weight, std=0.02)
        h = torch.randn(64, d)
        h[:, :8] *= 20  # outlier channels, as real LMs' final hidden states have
        ref = LMHead(head, True, "fp32")(h)
        modes = {"bf16x3 (split, fp32 out)": LMHead(head, True, "bf16x3")(h),
                 "bf16 (one pass, fp32 out)": LMHead(head, True, "bf16")(h),
                 "bf16 head (bf16 logits)": F.linear(h.bfloat16(), head.weight.bfloat16()).float()}
        lref, top = torch.log_softmax(ref, -1), ref.argmax(-1, keepdim=True)
        for name, x in modes.items():
            dl = torch.log_softmax(x, -1) - lref
            print(f"{d:>6} {vocab:>6}  {name:<28} {(x - ref).abs().max():>11.2e} "
                  f"{dl.abs().max():>10.2e} {dl.gather(-1, top).abs().mean():>17.2e}")


if __name__ == "__main__":
    main()
