"""Prompt encoding for real models: the tokenizer's chat template (model.chat_template).

Instruct/chat checkpoints (Qwen2.5-Instruct, Llama-3-Instruct, ...) were trained on prompts
wrapped in their chat format; feeding them raw text measurably lowers the starting pass rate, so
a study on such a model sets `model.chat_template: true`. The proxy's character tokenizer has
no template and keeps raw prompts. Works for HF ids and local paths alike (the template ships in
tokenizer_config.json / chat_template.jinja next to the weights).
"""

from __future__ import annotations

from typing import Callable


def prompt_encoder(tokenizer, chat_template: bool,
                   system: str | None = None) -> Callable[[str], list[int]]:
    """text -> prompt token ids: raw (no special tokens added), or one user turn in the
    tokenizer's chat template followed by the assistant header (add_generation_prompt)."""
    if not chat_template:
        return lambda text: tokenizer(text, add_special_tokens=False).input_ids
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(f"model.chat_template is true but the tokenizer {name!r} has no chat "
                         "template; set model.chat_template: false or use an instruct checkpoint")

    def encode(text: str) -> list[int]:
        messages = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns an encoding
            ids = ids["input_ids"]
        return list(ids)

    return encode
