"""The CPU proxy: a tiny Llama built from a config with a character tokenizer, warmed up by a
supervised phase on the task so that RL starts from a non-zero pass rate, cached on disk."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from trainer.config import TrainConfig
from trainer.model import completion_logprobs, pack
from trainer.precision import LMHead


def cache_root() -> Path:
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


def proxy_key(config: TrainConfig) -> str:
    """Everything that changes the warmed proxy: its architecture, warm-up and the task data."""
    blob = json.dumps({"proxy": config.model.proxy.model_dump(mode="json"),
                       "task": config.task.model_dump(mode="json"), "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def build_proxy(config: TrainConfig):
    """Tiny Llama from a config + char tokenizer, warmed up by supervised steps on the task."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.tasks import build_task
    from trainer.tokenizer import char_tokenizer

    p = config.model.proxy
    tok = char_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers, num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_heads, max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, attn_implementation="sdpa",
    )
    torch.manual_seed(config.task.data_seed)
    model = LlamaForCausalLM(cfg)
    if p.warmup_steps:
        supervised_warmup(model, tok, build_task(config.task), p.warmup_steps, p.warmup_lr,
                          p.warmup_batch_size, seed=config.task.data_seed)
    return model, tok


def supervised_warmup(model: nn.Module, tok, task, steps: int, lr: float, batch: int,
                      seed: int, on_step=None) -> None:
    """Teacher-forced steps on (prompt, answer+EOS) pairs so RL starts from a partial pass rate."""
    g = torch.Generator().manual_seed(seed)
    prompts = [tok(p.prompt, add_special_tokens=False).input_ids for p in task.train]
    targets = [tok(task.target(p), add_special_tokens=False).input_ids + [tok.eos_token_id]
               for p in task.train]
    # Constant LR: a longer warm-up extends a shorter one, so `warmup_steps` dials the
    # starting pass rate predictably.
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    body, head = model.get_decoder(), LMHead(model.get_output_embeddings(), fp32=True)
    model.train()
    for step in range(steps):
        idx = torch.randint(len(prompts), (batch,), generator=g).tolist()
        batch_ = pack([prompts[i] for i in idx], [targets[i] for i in idx], tok.pad_token_id)
        logp, _ = completion_logprobs(body, head, batch_, torch.device("cpu"), "fp32")
        loss = -(logp * batch_["mask"]).sum() / batch_["mask"].sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), opt.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step + 1)
    model.eval()
