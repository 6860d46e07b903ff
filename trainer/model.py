"""Policy model: load any HF causal LM (the CPU proxy is built in trainer/proxy.py) and pick
this process's device. The forward the trainer uses (per-token log-probs of completions) is
in trainer/logprobs.py, which the proxy's warm-up also uses: kept apart so that proxy.py and
this module do not import each other.
"""

from __future__ import annotations

import torch

from trainer.config import TrainConfig
from trainer.distributed import read_env, resolve_device
from trainer.hub import load_pretrained
from trainer.proxy import proxy_path


def pick_device(name: str) -> torch.device:
    """engine.device -> this process's device: under a multi-process launcher each rank takes
    the GPU of its LOCAL_RANK (cuda:LOCAL_RANK), never all of them cuda:0."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        return resolve_device("cuda", read_env().local_rank)
    return torch.device(name)


def load_model(config: TrainConfig):
    """(model in fp32, tokenizer). Proxy models come from the cache (built once per config).

    A real model (`model.name_or_path`: hub id or local dir) that cannot be loaded here raises
    trainer.hub.AssetUnavailable with one line naming it and how to pre-fill the cache."""
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
