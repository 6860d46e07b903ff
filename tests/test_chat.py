"""trainer/models/chat.py: prompts wrapped in a tokenizer's chat template (real tokenizer, real
Jinja template, saved and reloaded from a local path as a user's checkpoint would be)."""

from __future__ import annotations

import pytest

from trainer.models.chat import prompt_encoder
from trainer.models.tokenizer import char_tokenizer

TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant:{% endif %}")


def test_raw_prompts_without_template():
    tok = char_tokenizer()
    enc = prompt_encoder(tok, False)
    assert tok.decode(enc("12+34=")) == "12+34="


def test_chat_template_from_local_path(tmp_path):
    from transformers import AutoTokenizer

    tok = char_tokenizer()
    tok.chat_template = TEMPLATE
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)  # as model.name_or_path: <local dir>
    ids = prompt_encoder(loaded, True)("12+34=")
    assert loaded.decode(ids) == "<s>user:12+34=\n<s>assistant:"
    sys_ids = prompt_encoder(loaded, True, system="be brief")("1+1=")
    assert loaded.decode(sys_ids).startswith("<s>system:be brief\n<s>user:1+1=")


def test_chat_template_missing_is_a_clear_error():
    with pytest.raises(ValueError, match="has no chat template"):
        prompt_encoder(char_tokenizer(), True)
