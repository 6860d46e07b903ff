"""The one forward the trainer uses: per-token log-probs of completions given prompts, with
the LM head applied separately so its precision is ours to choose (precision.py). Also the
batch packing it reads (`pack`: completions aligned at one column; `pack_right`: rows back to
back). Used by the RL loop and by the proxy's supervised warm-up.
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.models.precision import LMHead, autocast

# What must run when a forward (+ its backward) of the trainer's begins, by the body it runs on:
# under ZeRO-3 the engine's begin_pass (trainer/engine_deepspeed.py), registered by
# trainer/loop/setup.py. Why here: every forward of the body starts in one of the functions
# below, and the trainer calls the decoder and the head itself, never the top module whose
# forward-pre-hook is what tells DeepSpeed a pass begins (see DeepSpeedEngine.begin_pass).
_PASS_STARTS: "weakref.WeakKeyDictionary[nn.Module, Callable[[], None]]" = \
    weakref.WeakKeyDictionary()


def on_pass_start(body: nn.Module, fn: Callable[[], None]) -> None:
    """Call `fn` at the start of every forward pass these functions run on `body` (one per
    micro-batch, however many times the pass calls the body: shared_prefix_logprobs calls it
    twice)."""
    _PASS_STARTS[body] = fn


def _pass_starts(body: nn.Module) -> None:
    fn = _PASS_STARTS.get(body)
    if fn is not None:
        fn()


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


def pack_right(prompts: list[list[int]], completions: list[list[int]], pad: int) -> dict:
    """Each row's prompt and completion back to back from column 0, right-padded to the
    longest row; `start` [B] is where each completion begins, `mask` [B, T] marks completion
    tokens (as in `pack`).

    Why: `pack` aligns completions at one column, so a row pays for the longest prompt AND the
    longest completion of its batch; back to back, a row pays only for the longest row, which
    length bucketing (trainer/loop/microbatch.py) keeps close to its own. Padding only on the right
    also needs no attention mask (causal attention never looks right) and no position shift."""
    B = len(prompts)
    L = max(len(p) + len(c) for p, c in zip(prompts, completions))
    T = max(1, max(len(c) for c in completions))
    ids = torch.full((B, L), pad, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(list(p) + list(c), dtype=torch.long)
        attn[i, : len(p) + len(c)] = 1
        mask[i, : len(c)] = 1
    return {"input_ids": ids, "attention_mask": attn, "mask": mask,
            "start": torch.tensor([len(p) for p in prompts])}


def right_padded_logprobs(body: nn.Module, head: LMHead, batch: dict, device: torch.device,
                          dtype: str, temperature: float = 1.0, with_entropy: bool = False):
    """`completion_logprobs` of a `pack_right` batch: log pi of each completion token [B, T]
    (and entropy), read at each row's own offset. Positions past a row's end are clamped to
    its last column: finite values the loss mask then drops."""
    _pass_starts(body)
    ids = batch["input_ids"].to(device)
    L, T = ids.shape[1], batch["mask"].shape[1]
    at = batch["start"].to(device)[:, None] + torch.arange(T, device=device)  # target columns
    at = at.clamp(max=L - 1)
    with autocast(device, dtype):
        hidden = body(input_ids=ids, use_cache=False).last_hidden_state
        h = hidden.gather(1, (at - 1).clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1]))
        return head_logprobs(head, h, ids.gather(1, at), temperature, with_entropy)


def completion_logprobs(body: nn.Module, head: LMHead, batch: dict, device: torch.device,
                        dtype: str, temperature: float = 1.0, with_entropy: bool = False):
    """log pi(token) of each completion token [B, T] (and entropy [B, T] if asked)."""
    _pass_starts(body)
    ids = batch["input_ids"].to(device)
    P, T = batch["P"], batch["mask"].shape[1]
    kw = {}
    if batch["padded"]:
        attn = batch["attention_mask"].to(device)
        kw = {"attention_mask": attn, "position_ids": (attn.cumsum(-1) - 1).clamp(min=0)}
    with autocast(device, dtype):
        hidden = body(input_ids=ids, use_cache=False, **kw).last_hidden_state
        return head_logprobs(head, hidden[:, P - 1: P + T - 1], ids[:, P: P + T], temperature,
                             with_entropy)


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
    from transformers import DynamicCache  # transformers is slow to import; only this path needs it

    _pass_starts(body)

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
        return head_logprobs(head, torch.cat(hidden, 1), comp, temperature, with_entropy)


# Most logits held at once by `head_logprobs` (fp32: 4 bytes each). A real vocabulary makes the
# full [batch, tokens, vocab] tensor the largest thing in an RL step (128 samples x 512 tokens x
# 151,936 ids = 40 GB in fp32, several copies with softmax and its gradient); chunking keeps
# one chunk of ~1 GB instead, at the cost of recomputing each chunk's head in the backward.
MAX_LOGITS_PER_CHUNK = 2 ** 28


def head_logprobs(head: LMHead, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                  with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target [B, T] (and entropy) from final hidden states [B, T, H].

    Small vocabularies (the proxy) take one pass. Above MAX_LOGITS_PER_CHUNK logits, rows of
    tokens go through the head in chunks under activation checkpointing, so only the hidden
    states are kept for the backward, never the logits: same values, a fraction of the memory."""
    vocab = head.head.weight.shape[0]
    B, T = targets.shape
    rows = max(1, MAX_LOGITS_PER_CHUNK // vocab)
    if B * T <= rows:
        return _logp_entropy(head(hidden), targets, temperature, with_entropy)
    flat_h, flat_t = hidden.reshape(B * T, -1), targets.reshape(B * T)

    def chunk(h: torch.Tensor, t: torch.Tensor):
        logp, ent = _logp_entropy(head(h), t, temperature, with_entropy)
        return logp, ent if ent is not None else logp.new_zeros(())

    outs = [checkpoint(chunk, flat_h[a: a + rows], flat_t[a: a + rows], use_reentrant=False)
            if torch.is_grad_enabled() else chunk(flat_h[a: a + rows], flat_t[a: a + rows])
            for a in range(0, B * T, rows)]
    logp = torch.cat([o[0] for o in outs]).reshape(B, T)
    return logp, torch.cat([o[1] for o in outs]).reshape(B, T) if with_entropy else None


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
