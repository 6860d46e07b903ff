"""The CPU proxy's model: a tiny Llama built from `model.proxy` with a character tokenizer
(`new_proxy`), and what names its warmed copy in the cache (`proxy_key`).

The warm-up that teaches it the task measures a pass rate by sampling, so it sits above the
generation service: trainer/warmup.py (build_proxy); the cache and loading: trainer/policy.py
(proxy_path, load_model). This module imports nothing of either.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # types only: nothing here reads the config's code
    from trainer.config import TrainConfig


def cache_root() -> Path:
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


# Bump whenever the warm-up code changes what it builds: cached proxies built by older code
# then miss the cache instead of outliving it.
WARMUP_VERSION = 3  # 3: built with denormals flushed in every process


class WarmupError(ValueError):
    """The warm-up never reached its target band (the message says what to change)."""


def proxy_key(config: TrainConfig) -> str:
    """Everything that changes the warmed proxy: its architecture and warm-up, the task data,
    the warm-up code's version and the libraries whose numerics it runs on. Not the RL
    settings: every variant of a study starts from the same warmed model."""
    import transformers  # slow to import; only for its version here

    blob = json.dumps({"proxy": config.model.proxy.model_dump(mode="json"),
                       "task": warmup_task_config(config).model_dump(mode="json"),
                       "warmup_version": WARMUP_VERSION, "torch": torch.__version__,
                       "transformers": transformers.__version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def warmup_task_config(config: TrainConfig):
    """The task the warm-up teaches and measures: the run's, minus the calibration cap (the cap
    lowers what the held-out measurement can score, so the warm-up would stop elsewhere; a
    capped variant must start from its base's model), and on the whole training pool (the RL
    pool size is an RL setting: every pool size starts from one warmed model)."""
    return config.task.model_copy(update={"unanswerable_fraction": 0.0, "rl_pool": None})


def new_proxy(config: TrainConfig):
    """The proxy before any warm-up: a tiny Llama from `model.proxy` with the character
    tokenizer, its weights drawn from the task's data seed; (model, tokenizer)."""
    # transformers is slow to import (and trainer.models.tokenizer imports it): only a build pays.
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.models.tokenizer import char_tokenizer

    p = config.model.proxy
    tok = char_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers, num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_heads, max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, attn_implementation="sdpa",
    )
    # The trainer runs with denormals flushed (trainer/loop/setup.py); the warm-up must too,
    # whichever process builds the proxy first (a run, a test fixture, a benchmark's parent):
    # with and without flushing, one warm-up lands at different steps and weights (the recipe's:
    # 1,066 vs 1,069 steps), and the cache would keep whichever came first. No getter exists, so
    # the process stays in the trainer's mode afterwards.
    torch.set_flush_denormal(True)
    torch.manual_seed(config.task.data_seed)
    return LlamaForCausalLM(cfg), tok
