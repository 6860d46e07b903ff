"""The policy model and what reads it: finding an HF checkpoint, the CPU proxy's architecture,
its tokenizer and chat template, the fp32 LM head, and the log-probs of completions that the
loss and the generators share. Nothing here samples: loading the policy (trainer/policy.py)
and warming the proxy up (trainer/warmup.py, which measures by sampling) sit above this and
the generation service.

    hub.py        a model or dataset id -> local files, offline-first, one-line errors
    proxy.py      the CPU proxy: a tiny char-level Llama (untrained) and its cache key
    tokenizer.py  the proxy's character tokenizer
    chat.py       prompt text -> ids, through the chat template of a chat model
    precision.py  the LM head in fp32 (ScaleRL), for the trainer and the hf generator
    logprobs.py   completion log-probs and entropies: shared-prefix, packed, micro-batched
"""
