"""Policy model: load any HF causal LM (the CPU proxy is built in trainer/models/proxy.py) and pick
this process's device. The forward the trainer uses (per-token log-probs of completions) is
in trainer/models/logprobs.py, which the proxy's warm-up also uses: kept apart so that proxy.py and
this module do not import each other.
"""

from __future__ import annotations

import torch

from trainer.config import TrainConfig
from trainer.dist.groups import resolve_device
from trainer.models.hub import load_pretrained
from trainer.models.proxy import proxy_path


def pick_device(name: str) -> torch.device:
    """engine.device -> this process's device: the one GPU trainer/dist/binding.py bind_devices
    left it (cuda:0), or the CPU. No index from a rank here (see trainer/dist/binding.py)."""
    return resolve_device(name)


def load_model(config: TrainConfig):
    """(model in fp32, tokenizer). Proxy models come from the cache (built once per config).

    A real model (`model.name_or_path`: hub id or local dir) that cannot be loaded here raises
    trainer.models.hub.AssetUnavailable with one line naming it and how to pre-fill the cache."""
    if config.model.name_or_path is None:
        path = str(proxy_path(config))
    else:
        path = config.model.name_or_path
    model, tok = load_pretrained(path, dtype=torch.float32)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if config.model.gradient_checkpointing:
        # Non-reentrant: gradients reach the weights even though the embedding output (the
        # checkpointed blocks' input) does not require grad. Active only in train() mode.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tok
