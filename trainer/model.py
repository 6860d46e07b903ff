"""Policy model: load any HF causal LM, or build (and cache) the tiny CPU proxy.

Also the one forward the trainer uses: per-token log-probs of completions given prompts,
with the LM head applied separately so its precision is ours to choose (precision.py).
"""

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
from trainer.precision import LMHead, autocast


def cache_root() -> Path:
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


def pick_device(name: str) -> torch.device:
    """engine.device -> this process's device: under a multi-process launcher each rank takes
    the GPU of its LOCAL_RANK (cuda:LOCAL_RANK), never all of them cuda:0."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        from trainer.distributed import read_env, resolve_device

        return resolve_device("cuda", read_env().local_rank)
    return torch.device(name)


def load_model(config: TrainConfig):
    """(model in fp32, tokenizer). Proxy models come from the cache (built once per config)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if config.model.name_or_path is None:
        path = proxy_path(config)
    else:
        path = config.model.name_or_path
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if config.model.gradient_checkpointing:
        # Non-reentrant: gradients reach the weights even though the embedding output (the
        # checkpointed blocks' input) does not require grad. Active only in train() mode.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tok


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


def pack(prompts: list[list[int]], completions: list[list[int]], pad: int) -> dict:
    """Left-pad prompts, right-pad completions, so every completion starts at column P."""
    P = max(len(p) for p in prompts)
    T = max(1, max(len(c) for c in completions))
    B = len(prompts)
    ids = torch.full((B, P + T), pad, dtype=torch.long)
    attn = torch.zeros((B, P + T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, P - len(p): P] = torch.tensor(p)
        ids[i, P: P + len(c)] = torch.tensor(c, dtype=torch.long)
        attn[i, P - len(p): P + len(c)] = 1
        mask[i, : len(c)] = 1
    return {"input_ids": ids, "attention_mask": attn, "mask": mask, "P": P,
            "padded": bool((attn[:, :P] == 0).any())}


def completion_logprobs(body: nn.Module, head: LMHead, batch: dict, device: torch.device,
                        dtype: str, temperature: float = 1.0, with_entropy: bool = False):
    """log pi(token) of each completion token [B, T] (and entropy [B, T] if asked)."""
    ids = batch["input_ids"].to(device)
    P, T = batch["P"], batch["mask"].shape[1]
    kw = {}
    if batch["padded"]:
        attn = batch["attention_mask"].to(device)
        kw = {"attention_mask": attn, "position_ids": (attn.cumsum(-1) - 1).clamp(min=0)}
    with autocast(device, dtype):
        hidden = body(input_ids=ids, use_cache=False, **kw).last_hidden_state
        logits = head(hidden[:, P - 1: P + T - 1])
    return _logp_entropy(logits, ids[:, P: P + T], temperature, with_entropy)


def shared_prefix_logprobs(body: nn.Module, head: LMHead, prompts: list[list[int]],
                           group: list[int], completions: list[list[int]], pad: int,
                           device: torch.device, dtype: str, temperature: float = 1.0,
                           with_entropy: bool = False):
    """`completion_logprobs` computing each distinct prompt once, not once per sample.

    With G samples per prompt, the prompt's forward (and backward) is shared by its G
    completions: the prefix runs on the U distinct prompts, its KV cache (with autograd
    history) is indexed out to the B samples, and only completion tokens run per sample.
    Same math as the packed forward; ~G x less prompt compute.
    `prompts[u]` are the distinct prompts, `group[b]` the prompt of sample b.
    """
    from transformers import DynamicCache

    U, B = len(prompts), len(completions)
    P = max(len(p) for p in prompts)
    T = max(1, max(len(c) for c in completions))
    ids_p = torch.full((U, P), pad, dtype=torch.long)
    attn_p = torch.zeros((U, P), dtype=torch.long)
    for u, p in enumerate(prompts):
        ids_p[u, P - len(p):] = torch.tensor(p)
        attn_p[u, P - len(p):] = 1
    comp = torch.full((B, T), pad, dtype=torch.long)
    for b, c in enumerate(completions):
        comp[b, : len(c)] = torch.tensor(c, dtype=torch.long)
    ids_p, attn_p, comp = ids_p.to(device), attn_p.to(device), comp.to(device)
    idx = torch.tensor(group, device=device)
    padded = bool((attn_p == 0).any())
    cache = DynamicCache()
    with autocast(device, dtype):
        kw = {"attention_mask": attn_p, "position_ids": (attn_p.cumsum(-1) - 1).clamp(min=0)} \
            if padded else {}
        h_p = body(input_ids=ids_p, past_key_values=cache, use_cache=True, **kw).last_hidden_state
        hidden = [h_p[:, -1:].index_select(0, idx)]  # predicts each completion's first token
        if T > 1:
            cache.reorder_cache(idx)  # index_select: differentiable, gradients reach the prefix
            attn = torch.cat([attn_p.index_select(0, idx),
                              torch.ones((B, T - 1), dtype=attn_p.dtype, device=device)], 1)
            pos = attn_p.sum(-1).index_select(0, idx)[:, None] + torch.arange(T - 1, device=device)
            h_c = body(input_ids=comp[:, : T - 1], past_key_values=cache, use_cache=True,
                       attention_mask=attn, position_ids=pos).last_hidden_state
            hidden.append(h_c)
        logits = head(torch.cat(hidden, 1))
    return _logp_entropy(logits, comp, temperature, with_entropy)


def _logp_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                  with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target token at `temperature` (the sampler's distribution), and the
    entropy of that distribution (a diagnostic, so computed without autograd)."""
    logits = logits / temperature
    logz = torch.logsumexp(logits, -1)
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - logz
    ent = None
    if with_entropy:
        with torch.no_grad():
            lp = logits - logz[..., None]
            ent = -(lp.exp() * lp).sum(-1)
    return logp, ent
