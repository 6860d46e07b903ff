"""Placeholder replaced below."""


def stream_service(gen, config, tokenizer):
    return None
