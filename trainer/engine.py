"""Optimizer engines: what turns a loss into an update.

Contract (each engine registered by name in trainer/torch_axes.py; DeepSpeed's is
`trainer.engine_deepspeed:make_deepspeed_engine`):
`Engine.model` is the module to forward, on `Engine.device`; `backward(loss, boundary)`
accumulates one micro-batch's gradients (`boundary`: the step's last micro-batch, where a
data-parallel engine may reduce them); `step(loss=None)` (backward of `loss` first, if given)
does grad clip, optimizer and LR-scheduler step, zero grad, and returns the grad norm;
`save(path)` / `load(path)` round-trip model + optimizer + scheduler (`collective_save`: every
rank takes part); `lr()` is the current learning rate. A non-finite grad norm skips the update
(the loop then stops the run as diverged) so a NaN never reaches the weights that get
checkpointed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Protocol

import torch
from torch import nn

from trainer.config import TrainConfig
from trainer.dist.groups import average_grads
from trainer.torch_axes import ENGINES


class Engine(Protocol):
    model: nn.Module
    device: torch.device  # where the model lives: this process's one GPU, or the CPU
    collective_save: bool  # save/load are collectives every rank joins (else rank 0 saves)

    def lr(self) -> float: ...

    def backward(self, loss: torch.Tensor, boundary: bool = True) -> None: ...

    def step(self, loss: torch.Tensor | None = None) -> float: ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...


def make_engine(config: TrainConfig, model: nn.Module) -> Engine:
    return ENGINES.get(config.engine.type)(config, model)


def constant_with_warmup(warmup: int) -> Callable[[int], float]:
    """ScaleRL's schedule: linear warm-up for `warmup` steps, then constant."""
    return lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0


def make_torch_engine(config: TrainConfig, model: nn.Module) -> Engine:
    return TorchEngine(config, model)


class TorchEngine:
    """Plain AdamW (ScaleRL: eps 1e-15, wd 0.01, clip 1.0), one device per process.

    Data parallel over a torch.distributed group (world > 1): gradients are averaged across
    ranks before clipping, so every rank applies the same update to identical weights (the
    loop gives each rank its share of the batch with the loss weighted accordingly). An
    explicit all-reduce instead of DistributedDataParallel because the trainer calls the
    decoder body and the LM head separately (DDP only hooks module.forward). Only rank 0 saves:
    the state is identical on every rank.
    """

    collective_save = False

    def __init__(self, config: TrainConfig, model: nn.Module) -> None:
        o = config.optim
        self.model = model
        self.device = next(model.parameters()).device  # the loop moved it there
        self.clip = o.grad_clip
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas),
                                           eps=o.eps, weight_decay=o.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, constant_with_warmup(o.warmup_steps))

    def backward(self, loss: torch.Tensor, boundary: bool = True) -> None:
        """Accumulate one micro-batch's gradients into .grad (averaged over ranks in step)."""
        loss.backward()

    def step(self, loss: torch.Tensor | None = None) -> float:
        if loss is not None:
            self.backward(loss)
        average_grads(self.model)
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip))
        if math.isfinite(norm):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict()}, path / "engine.pt")

    def load(self, path: Path) -> None:
        state = torch.load(path / "engine.pt", map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

