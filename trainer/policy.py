"""The policy a run starts from, ready to train: the HF causal LM `model.name_or_path` names, or
the CPU proxy (no name) built once per config, warmed up (trainer/warmup.py) and cached on disk
(`proxy_path`), and this process's device. The forward the trainer uses (per-token log-probs
of completions) is trainer/models/logprobs.py's, which the proxy's warm-up also uses.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import torch

from trainer.config import TrainConfig
from trainer.dist.groups import resolve_device
from trainer.models.hub import load_pretrained
from trainer.models.proxy import cache_root, proxy_key
from trainer.warmup import build_proxy


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


def proxy_path(config: TrainConfig) -> Path:
    """Directory of the warmed proxy; built under a file lock + atomic rename on first use so
    concurrent jobs of a sweep neither build it twice nor see a half-written model."""
    root = cache_root() / "proxy"
    root.mkdir(parents=True, exist_ok=True)
    final = root / proxy_key(config)
    if (final / "config.json").exists():
        return final
    with open(root / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / "config.json").exists():
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}-"))
            try:
                model, tok = build_proxy(config)
                model.save_pretrained(tmp)
                tok.save_pretrained(tmp)
                os.rename(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return final
