"""Character tokenizer for the CPU proxy: one id per printable ASCII character.

Built with `tokenizers` (WordLevel + per-character Split) and wrapped in
PreTrainedTokenizerFast so it saves/loads like any HF tokenizer and the rest of the trainer
treats proxy and real models the same way.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every single character is its own "word"; spaces included (isolated, not dropped).
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        unk_token="<unk>", clean_up_tokenization_spaces=False,
    )
