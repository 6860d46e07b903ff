"""The run's fixed parts, built once at its start: the device and ranks, the task and its
prompts, the model and the optimizer engine. Nothing here changes while the run trains (the
engine's weights do, inside the engine); what changes is the run's state (state.py).

The order of the start-up is part of a run's behaviour: the seeds are set first, and the
proxy's load, the engine's initialization and the pool draw from them in this order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.config import TrainConfig
from trainer.dist.groups import group_timeout_s, join_process_group, rank, world_size
from trainer.engine import make_engine
from trainer.models.chat import prompt_encoder
from trainer.policy import load_model, pick_device
from trainer.models.logprobs import on_pass_start
from trainer.models.precision import LMHead
from trainer.tasks import Problem, Task, build_task


@dataclass
class Parts:
    """What a run trains with (see the module doc)."""

    device: torch.device
    rank: int
    world: int
    task: Task
    tok: Any  # the tokenizer
    train_prompts: list[list[int]]  # token ids of every training prompt
    eval_problems: list[Problem]
    eval_prompts: list[list[int]]
    engine: Any  # trainer/engine.py Engine: the model, its optimizer and scheduler
    model: torch.nn.Module
    head: LMHead  # the LM head, fp32 if precision.trainer_lm_head_fp32
    body: torch.nn.Module  # the decoder under the head
    n_params: int  # every parameter, ZeRO-3 shards counted whole (ds_numel)
    zero3: bool

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes the run dir."""
        return self.rank == 0


def setup_distributed(config: TrainConfig) -> bool:
    """Join the launcher's process group (multi-process jobs only); True on rank 0. The torch
    engine is data parallel through its gradient all-reduce, the deepspeed engine through
    DeepSpeed; both need the group before the engine is built. Its collectives wait up to
    engine.collective_timeout_minutes (rank 0's lone vllm eval keeps the others at a barrier).
    The process's device was bound before (trainer/dist/binding.py bind_devices)."""
    return join_process_group(config.engine.device, timeout_s=group_timeout_s(config))


def build(config: TrainConfig, run_dir: Path) -> Parts:
    """Seeds, process group, device, task and prompts, model, engine (see the module doc)."""
    torch.set_flush_denormal(True)  # tiny models hit denormals: 10-50x slower CPU ops
    if config.engine.threads:
        torch.set_num_threads(config.engine.threads)
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    setup_distributed(config)  # idempotent; also for callers that skip run()
    if rank() == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
    device = pick_device(config.engine.device)
    task = build_task(config.task, config.eval.split)  # first: a missing dataset fails fast
    model, tok = load_model(config)
    enc = prompt_encoder(tok, config.model.chat_template)  # chat models: their template
    n_eval = config.eval.num_prompts or config.task.num_eval_prompts
    eval_problems = task.eval[:n_eval]
    train_prompts = [enc(p.prompt) for p in task.train]
    eval_prompts = [enc(p.prompt) for p in eval_problems]
    engine = make_engine(config, model.to(device))
    model = engine.model
    model.eval()  # train() only around the update (gradient checkpointing, dropout)
    body = model.get_decoder()
    zero3 = config.engine.type == "deepspeed" and config.engine.zero_stage == 3
    if zero3:  # the trainer calls the body, not the top module: tell ZeRO-3 where passes begin
        on_pass_start(body, engine.begin_pass)  # (its prefetch needs it: engine_deepspeed.py)
    return Parts(
        device=engine.device,
        rank=rank(), world=world_size(),  # after the engine: single-process DeepSpeed, a world of 1
        task=task, tok=tok, train_prompts=train_prompts, eval_problems=eval_problems,
        eval_prompts=eval_prompts, engine=engine, model=model,
        head=LMHead(model.get_output_embeddings(), config.precision.trainer_lm_head_fp32),
        body=body,
        # ZeRO-3 leaves each rank an empty shard per parameter; ds_numel is the full size.
        n_params=sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()),
        zero3=zero3)
