"""Micro-batching by tokens (issue 23 item 3): padding share and tokens/s with and without
length bucketing, and greedy bucketing (before) vs the trainer's optimal split.

    python benchmarks/bench_packing.py                  # everything (~3-5 min on 2 loaded cores)
    python benchmarks/bench_packing.py --only padding   # or: forward, proxy

padding   Share of token slots that are padding, for synthetic length mixes (lengths are all the
          padding share depends on): one padded batch as the trainer ran before micro-batching
          (trainer.models.logprobs.pack: prompts left-padded to the longest prompt, completions to the
          longest completion) vs length-bucketed micro-batches of engine.micro_batch_tokens
          (trainer.models.logprobs.pack_right: rows back to back, right-padded), cut greedily (`greedy`:
          longest first, fill until the budget; the trainer before) or by the trainer's
          split (`split`: trainer.loop.microbatch.plan_micro_batches); budgets 16k, 32k, 64k and
          `share` (each rank's whole share of tokens). Mixes: `reasoning`
          (prompt 100-600 tokens shared by 16 samples, completions log-normal around ~1.8k
          with a tail cut at 16k: many short answers, some truncated), `uniform` (completions
          uniform 1-16k), `proxy` (the CPU proxy's arithmetic: 8-token prompts, 1-6 token answers);
          64 prompts x 16 samples dealt to 8 ranks as the trainer deals them; micro-batches
          counted on the rank with most.
forward   Tokens/s of forward + backward through the trainer's own functions on a Llama built from
          a config (random init, CPU), on the `reasoning` mix scaled to a 1k context (64 rows,
          budget 4096): one padded batch vs greedy vs split micro-batches; interleaved run by
          run so machine load hits every side alike.
proxy     The real trainer step (`trainer.loop.train.train_step`) of the tiny proxy on one
          fixed rollout batch, engine.micro_batch_tokens None vs 40 (time per step, padding
          share).
Results go to benchmarks/results_packing.json.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this checkout, not an installed copy
sys.path.insert(0, str(ROOT / "tests"))  # the tiny proxy's config lives with the tests

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from trainer.loop.microbatch import (  # noqa: E402
    deal_groups,
    padded_tokens,
    padding_share,
    plan_micro_batches,
)

BUDGETS = (16384, 32768, 65536)


def mix(name: str, n: int, seed: int, max_len: int = 16384) -> list[tuple[int, int]]:
    """(prompt, completion) lengths of n samples, 16 per prompt."""
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    for _ in range(n // 16):
        p = {"proxy": 8}.get(name) or rng.randint(100, 600) * max_len // 16384
        for _ in range(16):
            if name == "reasoning":
                c = int(rng.lognormvariate(7.5, 1.0) * max_len / 16384)
            elif name == "uniform":
                c = rng.randint(1, max_len)
            else:
                c = rng.randint(1, 6)
            out.append((p, max(1, min(max_len - p, c))))
    return out


def _per_rank(lengths: list[tuple[int, int]], world: int) -> list[list[tuple[int, int]]]:
    """The rows each rank trains on: prompt groups of 16 dealt by tokens (as the trainer)."""
    size = {g: sum(p + c for p, c in lengths[g * 16:(g + 1) * 16])
            for g in range(len(lengths) // 16)}
    return [[lengths[g * 16 + s] for g in gs for s in range(16)]
            for gs in deal_groups(size, world)]


def greedy_plan(lengths: list[tuple[int, int]], budget: int | None) -> list[list[int]]:
    """The trainer's bucketing before the optimal split, kept as the baseline: rows longest
    first, each joins the open micro-batch unless its padded size would pass the budget."""
    if budget is None:
        return [list(range(len(lengths)))]
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-sum(lengths[i]), i)):
        if cur and padded_tokens([lengths[j] for j in cur + [i]]) > budget:
            out.append(cur)
            cur = []
        cur.append(i)
    return out + [cur]


PLANS = {"greedy": greedy_plan, "split": plan_micro_batches,  # the trainer's, 5% target
         "split10": lambda lengths, budget: plan_micro_batches(lengths, budget, max_padding=0.10)}


def _share(ranks: list[list[tuple[int, int]]], budget: int | str | None,
           how: str = "split") -> tuple[float, int]:
    """Padding share over all ranks' micro-batches, and the most micro-batches on one rank.
    Budget "share": as many tokens as the rank's whole share (padding then comes only from
    the rows x longest-row rule, not from the budget)."""
    slots = real = 0
    most = 0
    for lengths in ranks:
        b = sum(p + c for p, c in lengths) if budget == "share" else budget
        plan = PLANS[how](lengths, b)
        slots += sum(padded_tokens([lengths[i] for i in mb], b is not None) for mb in plan)
        real += sum(p + c for p, c in lengths)
        most = max(most, len(plan))
        assert b is None or all(len(mb) == 1 or padded_tokens([lengths[i] for i in mb]) <= b
                                for mb in plan), "a micro-batch over the budget"
    return 1.0 - real / slots, most


def bench_padding(world: int = 8) -> dict:
    """64 prompts x 16 samples (one paper-sized batch) dealt to 8 training ranks."""
    res = {}
    for name in ("reasoning", "uniform", "proxy"):
        ranks = _per_rank(mix(name, 1024, seed=0), world)
        row: dict = {"one_batch": _share(ranks, None)[0]}
        budgets = (256, 1024, "share") if name == "proxy" else BUDGETS + ("share",)
        for b in budgets:
            for how in PLANS:
                row[f"{how}_{b}"], row[f"{how}_micro_batches_{b}"] = _share(ranks, b, how)
        res[name] = row
        print(f"padding {name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float)
                                                else f"{k} {v}" for k, v in row.items()))
    return res


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=1024)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def _step(model, head, rows: list[tuple[list[int], list[int]]], budget: int | None,
          how: str = "split") -> None:
    """Forward + backward of the rows as the trainer does it: one batch, or micro-batches."""
    from trainer.models.logprobs import completion_logprobs, pack, pack_right, right_padded_logprobs

    body = model.get_decoder()
    dev = torch.device("cpu")
    lengths = [(len(p), len(c)) for p, c in rows]
    for mb in PLANS[how](lengths, budget):
        ps, cs = [rows[i][0] for i in mb], [rows[i][1] for i in mb]
        if budget is None:
            b = pack(ps, cs, 0)
            logp, _ = completion_logprobs(body, head, b, dev, "fp32")
        else:
            b = pack_right(ps, cs, 0)
            logp, _ = right_padded_logprobs(body, head, b, dev, "fp32")
        (logp * b["mask"]).sum().backward()
    model.zero_grad(set_to_none=True)


def bench_forward(reps: int) -> dict:
    from trainer.models.precision import LMHead

    torch.set_num_threads(1)
    model = _model().train()
    head = LMHead(model.get_output_embeddings(), True)
    rng = random.Random(1)
    lengths = mix("reasoning", 64, seed=1, max_len=1024)  # 4 prompts x 16 samples
    rows = [([rng.randrange(1, 512) for _ in range(p)], [rng.randrange(1, 512) for _ in range(c)])
            for p, c in lengths]
    tokens = sum(p + c for p, c in lengths)
    sides = {"one_batch": (None, "split"), "greedy_4096": (4096, "greedy"),
             "split_4096": (4096, "split")}
    times: dict[str, list[float]] = {k: [] for k in sides}
    _step(model, head, rows, 4096)  # warm-up
    for _ in range(reps):  # interleaved: load hits every side alike
        for name, (budget, how) in sides.items():
            t0 = time.perf_counter()
            _step(model, head, rows, budget, how)
            times[name].append(time.perf_counter() - t0)
    res = {"tokens": tokens, "reps": reps}
    for name, ts in times.items():
        med = statistics.median(ts)
        budget, how = sides[name]
        plan = PLANS[how](lengths, budget)
        res[name] = {"median_s": med, "tokens_per_s": tokens / med, "micro_batches": len(plan),
                     "padding_share": padding_share(lengths, plan, budget is not None)}
        print(f"forward {name}: {tokens / med:,.0f} tokens/s (median of {reps}: {med:.2f} s), "
              f"padding {res[name]['padding_share']:.3f} in {len(plan)} micro-batches")
    return res


def bench_proxy(reps: int) -> dict:
    import tempfile

    from _microbatch_script import config, vary_lengths

    from trainer.loop.train import start, train_step
    from trainer.torch_axes import MODES

    work = Path(tempfile.mkdtemp(prefix="bench-packing-"))
    runs = {m: start(config("torch", 0, "prompt", m), work / f"run-{m}") for m in (None, 40)}
    source = MODES.get("ppo_off_policy")(runs[None].ctx)
    batch = source.next(0)
    source.close()
    batch.rollout.penalty = [0.1 * ((7 * i) % 5) for i in range(len(batch.rollout.penalty))]
    vary_lengths(batch.rollout)
    times: dict = {m: [] for m in runs}
    for _ in range(reps):
        for m, run in runs.items():
            t0 = time.perf_counter()
            train_step(run, batch)
            times[m].append(time.perf_counter() - t0)
    res = {}
    for m, run in runs.items():
        means = run.state.window.means()
        res[str(m)] = {"median_step_s": statistics.median(times[m]),
                       "padding_frac": means["train/padding_frac"],
                       "micro_batches": means["train/micro_batches"]}
        print(f"proxy micro_batch_tokens={m}: {res[str(m)]}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["padding", "forward", "proxy"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results_packing.json")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI): "
                    "the padding shares only")
    args = ap.parse_args()
    if args.quick:
        args.only = "padding"
    out = {}
    if args.only in (None, "padding"):
        out["padding"] = bench_padding()
    if args.only in (None, "forward"):
        out["forward"] = bench_forward(args.reps)
    if args.only in (None, "proxy"):
        out["proxy"] = bench_proxy(args.reps)
    path = args.out
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
