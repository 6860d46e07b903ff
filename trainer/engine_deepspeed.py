"""Engine `deepspeed`: ZeRO stages 0-3 (engine.zero_stage), bf16 body with an fp32 LM head.

Why DeepSpeed: models of 0.5B-8B+ do not fit optimizer state (fp32 master + two Adam moments =
16 bytes/param) on one GPU; ZeRO-1/2/3 partition optimizer state / gradients / parameters across
the data-parallel ranks. Same contract as the torch engine (trainer/engine.py): `model`,
`backward(loss, boundary)`, `step(loss=None) -> grad norm`, `save(path)`, `load(path)`.
Micro-batches (engine.micro_batch_tokens, trainer/loop/microbatch.py) are accumulated with
DeepSpeed's manual accumulation boundary: the config keeps gradient_accumulation_steps 1 (the
number of micro-batches varies from step to step with the rollouts' lengths), each `backward`
sets the boundary (False until the step's last micro-batch) and does not rescale by the
accumulation steps, because the trainer's micro-batch losses already carry the whole batch's
denominators.

Precision: with precision.dtype=bf16 DeepSpeed casts the module to bf16 and keeps fp32 master
weights in its optimizer. The LM head's logits stay fp32 because the trainer applies the head
through trainer/models/precision.py's LMHead when precision.trainer_lm_head_fp32 is set:
ScaleRL's "FP32 at the LM head". On GPUs that is one GEMM of the bf16 hidden state and bf16
head weight with fp32 accumulation and fp32 logits, the same function vLLM 0.32's fp32 head
computes in the generator (vllm/model_executor/layers/logits_processor.py:170); on CPU both are
upcast and multiplied in fp32. The head's stored weight stays bf16 because ZeRO flattens each
parameter group into one dtype.

Distributed: one process per device, launched by Slurm or torchrun (trainer/dist/groups.py
turns their environment into the one torch.distributed reads); gloo on CPU, nccl on GPU.
Every rank must call step/save/load (they are collectives).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from trainer.config import TrainConfig
from trainer.dist.groups import group_timeout_s, init_distributed
from trainer.engine import constant_with_warmup
from trainer.validate import validate


def deepspeed_config(config: TrainConfig, world_size: int, on_gpu: bool = True) -> dict[str, Any]:
    """The DeepSpeed JSON config for this TrainConfig. gradient_accumulation_steps stays 1:
    the trainer marks the accumulation boundary itself (DeepSpeedEngine.backward), since its
    micro-batch count follows the rollouts' lengths, and each micro-batch loss is already
    weighted by the whole batch's denominators."""
    zero: dict[str, Any] = {"stage": config.engine.zero_stage}
    if config.engine.zero_stage == 3 and not on_gpu:
        # CPU (the tiny proxy, tests): partition even the smallest tensors so that stage 3 is
        # really exercised; on GPUs DeepSpeed's defaults keep small ones whole (fewer gathers).
        # Prefetch stays at DeepSpeed's default bucket on both (begin_pass turns it on).
        zero.update({"stage3_param_persistence_threshold": 0})
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "gradient_clipping": config.optim.grad_clip,
        "bf16": {"enabled": config.precision.dtype == "bf16"},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def persist_head_weight(ds_engine) -> None:
    """ZeRO-3: keep the LM head's weight whole on every rank.

    The trainer applies the head itself (trainer/models/precision.py LMHead: fp32 F.linear on
    `head.weight`) instead of calling the head module, so ZeRO-3's per-module gather hooks never
    fire for it and the partitioned weight would be an empty tensor. Marking it persistent (as
    ZeRO-3 does for small parameters) and adding it to the optimizer's persistent list makes
    DeepSpeed all-gather it after every step; its gradient is still reduce-scattered into the
    partitions by the usual per-parameter hooks. Costs one replicated vocab x hidden matrix.
    """
    head = ds_engine.module.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is None or not hasattr(weight, "ds_persist") or weight.ds_persist:
        return
    weight.ds_persist = True
    # The coordinator releases every parameter of a module after its forward until it has
    # recorded a complete trace (first step, or after a trace change such as generation);
    # parameters flagged external are exempt from that release.
    weight.is_external_param = True
    persistent = ds_engine.optimizer.persistent_parameters
    persistent.append(weight)
    weight.all_gather([weight])


def import_deepspeed():
    """`deepspeed`, imported without the optional `import mlflow` of its autotuner.

    deepspeed 0.19.8 imports its autotuner with the package (deepspeed/__init__.py ->
    runtime/config.py -> autotuning/autotuner.py:30-34, `try: import mlflow`), for autotuning
    experiments this trainer never runs. With mlflow installed (the `trackers` extra) that
    import is ~1.9 s of CPU in every rank's start (`python -X importtime -c "import deepspeed"`:
    mlflow 1.85 s of deepspeed's 2.28 s). A None entry in sys.modules makes it raise
    ImportError, which the autotuner catches (has_mlflow False); the entry is removed after,
    so logging.backends [mlflow] imports mlflow as usual. Runs before any thread of this
    process could import mlflow (engine build, at start-up)."""
    if "deepspeed" in sys.modules or "mlflow" in sys.modules:
        import deepspeed
        return deepspeed
    sys.modules["mlflow"] = None  # type: ignore[assignment]
    try:
        import deepspeed
    finally:
        del sys.modules["mlflow"]
    return deepspeed


class DeepSpeedEngine:
    """The Engine protocol over a deepspeed.DeepSpeedEngine."""

    collective_save = True  # every rank writes its partitions (save/load are collectives)

    def __init__(self, config: TrainConfig, model: torch.nn.Module) -> None:
        deepspeed = import_deepspeed()
        self.config = config
        # The device is this process's one visible GPU (trainer/dist/binding.py bind_devices), and
        # LOCAL_RANK=0 there: DeepSpeed sets its device from LOCAL_RANK
        # (deepspeed/runtime/engine.py DeepSpeedEngine._set_distributed_vars: device_rank =
        # self.local_rank = int(os.environ["LOCAL_RANK"]); zero/partition_parameters.py
        # Init.local_device likewise), so it lands on the same cuda:0 as the module.
        self.dist, self.device = init_distributed(config.engine.device,
                                                  timeout_s=group_timeout_s(config))
        if config.engine.threads:
            torch.set_num_threads(config.engine.threads)
        if config.model.gradient_checkpointing and not getattr(model, "is_gradient_checkpointing", True):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.to(self.device)
        o = config.optim
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps,
            weight_decay=o.weight_decay, **({"fused": True} if self.device.type == "cuda" else {}),
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, constant_with_warmup(o.warmup_steps))
        self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler,
            config=deepspeed_config(config, self.dist.world_size, self.device.type == "cuda"),
            dist_init_required=False,
        )
        self.model: torch.nn.Module = self.ds.module
        if config.engine.zero_stage == 3:
            persist_head_weight(self.ds)
        self.passes = 0  # forward passes begun (begin_pass)

    def _coordinator(self):
        """ZeRO-3's parameter coordinator (stage3.py:275 parameter_offload,
        parameter_offload.py:252 get_param_coordinator)."""
        return self.ds.optimizer.parameter_offload.get_param_coordinator()

    def begin_pass(self) -> None:
        """ZeRO-3: a forward (+ backward) of the trainer's begins: what the top module's
        forward-pre-hook does (deepspeed/runtime/zero/parameter_offload.py:299-308), which
        never runs because the trainer calls the decoder and the head itself
        (trainer/models/logprobs.py; on_pass_start, registered by trainer/loop/setup.py).
        reset_step (partitioned_param_coordinator.py:251-290) turns the trace INVALID ->
        RECORD -> COMPLETE at the first two passes and rewinds the parameter queue at every
        later one; with a complete trace each module's fetch prefetches the next ones' (420-485:
        "don't prefetch if we dont have a completed model trace"), so all-gathers overlap
        compute. Without it the trace stays INVALID (108) and every gather is on demand.
        A collective (it checks the recorded order against the other ranks, 259-267): every
        rank runs the same passes (the micro-batches are lined up across ranks)."""
        self.passes += 1
        self._coordinator().reset_step()

    def trace_state(self) -> str:
        """The coordinator's trace: "complete", "record" or "invalid" (for logs and tests)."""
        c = self._coordinator()
        return ("complete" if c.is_complete_trace() else "record" if c.is_record_trace()
                else "invalid")

    def backward(self, loss: torch.Tensor, boundary: bool = True) -> None:
        """Accumulate one micro-batch; DeepSpeed reduces the gradients over ranks at the
        boundary (ZeRO-2/3 reduce-scatter into the partitions as they go). Every rank must run
        the same number of micro-batches (the trainer lines them up)."""
        # DeepSpeed's own forward() starts each micro-batch by clearing its ZeRO optimizer's
        # backward bookkeeping (ZeRO-3: micro_step_id, whose 0 means "copy, don't accumulate";
        # ZeRO-1/2: grad_accum). The trainer calls the decoder body and LM head directly, never
        # ds.forward, so do it here: without it ZeRO-3 keeps only the last micro-batch's grads.
        clear = getattr(self.ds.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()
        self.ds.set_gradient_accumulation_boundary(boundary)
        self.ds.backward(loss, scale_wrt_gas=False)

    def step(self, loss: torch.Tensor | None = None) -> float:
        """(backward of `loss`, if given,) clip (DeepSpeed's gradient_clipping), optimizer +
        scheduler step, zero grad. Gradients are averaged over the data-parallel ranks by
        DeepSpeed."""
        if loss is not None:
            self.backward(loss)
        # Stage 0 without a bf16 optimizer wrapper clips inside step() but does not record the
        # norm; read it from the (already all-reduced) gradients first.
        pre = None
        if self.config.engine.zero_stage == 0:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            pre = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        return float(norm) if norm is not None else pre

    def save(self, path: str | os.PathLike) -> None:
        """DeepSpeed checkpoint (model, partitioned optimizer state, scheduler); collective."""
        Path(path).mkdir(parents=True, exist_ok=True)
        self.ds.save_checkpoint(str(path), tag="state", save_latest=False)

    def load(self, path: str | os.PathLike) -> None:
        load_path, _ = self.ds.load_checkpoint(str(path), tag="state")
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {path}")

    def lr(self) -> float:
        """Current learning rate (the metrics row's train/lr)."""
        return float(self.ds.get_lr()[0])


def make_deepspeed_engine(config: TrainConfig, model: torch.nn.Module) -> DeepSpeedEngine:
    """Factory registered as engine type "deepspeed" (lazily, from trainer/engine.py)."""
    # ZeRO-3 + pipeline + the hf generator (which deep-copies a module ZeRO-3 has partitioned)
    # and every other combination the trainer cannot run: one place, trainer/validate.py,
    # which `ablate sweep` also calls before anything is submitted.
    validate(config)
    return DeepSpeedEngine(config, model)
