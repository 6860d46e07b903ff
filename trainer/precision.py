"""Compute precision: the fp32 LM head and the body's compute dtype.

ScaleRL's precision fix is the LM head computed in fp32 on both the generator and the trainer
(the log-prob mismatch between them comes mostly from the final projection). Model weights stay
fp32 (master copy); the body runs under autocast in `precision.dtype`, and the head either in
fp32 or in the body dtype. This lives outside the rollout/engine backends so every backend
gets the same treatment.
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


class LMHead(nn.Module):
    """The final projection, in fp32 whatever the body dtype when `fp32` is set."""

    def __init__(self, head: nn.Linear, fp32: bool) -> None:
        super().__init__()
        self.head, self.fp32 = head, fp32

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.fp32:
            with torch.autocast(device_type=hidden.device.type, enabled=False):
                w = self.head.weight.float()
                b = None if self.head.bias is None else self.head.bias.float()
                return F.linear(hidden.float(), w, b)
        # Under bf16 autocast this projection runs in bf16: the mismatch ScaleRL measured.
        return self.head(hidden).float()
