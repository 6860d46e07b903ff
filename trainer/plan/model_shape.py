"""The shape of a policy model as the memory plan (trainer/plan/memory.py) needs it: layers,
widths, heads, vocabulary, read from the model's HF config.json (a local dir or the HF cache;
never downloaded), else from a table of known configs, else said to be unknown. The CPU proxy
has its own (model.proxy). Pure Python: no torch, no transformers import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from trainer.config import TrainConfig


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs from a model's HF config."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    source: str  # where the shape came from (config.json path, the known table, the proxy)

    @property
    def layer_params(self) -> int:
        h, d = self.hidden, self.head_dim
        attn = h * self.heads * d * 2 + h * self.kv_heads * d * 2  # q, o; k, v
        return attn + 3 * h * self.intermediate + 2 * h  # SwiGLU MLP, two RMSNorms

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden
        return self.layers * self.layer_params + embed * (1 if self.tied else 2) + self.hidden


# Shapes of models a study is likely to name, for planning where the HF cache is empty (the
# laptop that plans a cluster study). Values from each model's config.json on the Hub.
KNOWN: dict[str, dict] = {
    "Qwen/Qwen3-8B": dict(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                          intermediate=12288, vocab=151936, tied=False),
    "Qwen/Qwen3-4B": dict(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128,
                          intermediate=9728, vocab=151936, tied=True),
    "Qwen/Qwen3-1.7B": dict(layers=28, hidden=2048, heads=16, kv_heads=8, head_dim=128,
                            intermediate=6144, vocab=151936, tied=True),
    "Qwen/Qwen2.5-0.5B": dict(layers=24, hidden=896, heads=14, kv_heads=2, head_dim=64,
                              intermediate=4864, vocab=151936, tied=True),
    "Qwen/Qwen2.5-1.5B": dict(layers=28, hidden=1536, heads=12, kv_heads=2, head_dim=128,
                              intermediate=8960, vocab=151936, tied=True),
    "Qwen/Qwen2.5-7B": dict(layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128,
                            intermediate=18944, vocab=152064, tied=False),
}


def shape_from_hf(cfg: dict, source: str) -> ModelShape:
    """ModelShape from a config.json dict (Llama/Qwen2/Qwen3 field names)."""
    heads = cfg["num_attention_heads"]
    return ModelShape(
        layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"],
        tied=bool(cfg.get("tie_word_embeddings", False)), source=source)


@lru_cache(maxsize=64)
def model_shape(name_or_path: str) -> tuple[Optional[ModelShape], str]:
    """(shape, '') from a local dir, the HF cache or the known table; (None, why) otherwise.
    Offline-safe: never downloads."""
    local = Path(name_or_path) / "config.json"
    path: Optional[str] = str(local) if local.is_file() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(name_or_path, "config.json")
            path = hit if isinstance(hit, str) else None
        except Exception:  # noqa: BLE001 - not a repo id, no hub library: fall through
            path = None
    if path is not None:
        try:
            cfg = json.loads(Path(path).read_text())
            return shape_from_hf(cfg.get("text_config", cfg), path), ""
        except (OSError, ValueError, KeyError) as e:
            return None, f"{path}: unreadable model config ({e})"
    base = name_or_path.removesuffix("-Instruct")
    if base in KNOWN:
        return ModelShape(**KNOWN[base], source=f"known shape of {base}"), ""
    return None, (f"no config.json for {name_or_path!r} locally or in the HF cache (pre-fill "
                  "the cache, or point model.name_or_path at a local dir)")


def proxy_shape(c: TrainConfig) -> ModelShape:
    p = c.model.proxy
    return ModelShape(layers=p.num_layers, hidden=p.hidden_size, heads=p.num_heads,
                      kv_heads=p.num_heads, head_dim=p.hidden_size // p.num_heads,
                      intermediate=p.intermediate_size, vocab=100, tied=True,
                      source="CPU proxy (model.proxy)")
