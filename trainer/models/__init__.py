"""The policy model and what reads it: loading (an HF checkpoint or the CPU proxy, warmed up
once and cached), its tokenizer and chat template, the fp32 LM head, and the log-probs of
completions that the loss and the generators share.

    load.py       load_model: an HF causal LM (hub.py finds it) or the CPU proxy (proxy.py)
    hub.py        a model or dataset id -> local files, offline-first, one-line errors
    proxy.py      the CPU proxy: a tiny char-level Llama, warmed up to a measured pass rate
    tokenizer.py  the proxy's character tokenizer
    chat.py       prompt text -> ids, through the chat template of a chat model
    precision.py  the LM head in fp32 (ScaleRL), for the trainer and the hf generator
    logprobs.py   completion log-probs and entropies: shared-prefix, packed, micro-batched
"""
