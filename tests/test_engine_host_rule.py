"""Where the engines' client runs (rollout.vllm.client, trainer/generation/host.py): one rule
(trainer/plan/placement.py client_in_host) for the dry run's placement sentence and for the
trainer's start (host.py in_host, from this process's binding)."""

from __future__ import annotations

from test_engine_choice import paper, shape

from trainer.generation.host import in_host
from trainer.plan.memory import plan as memory_plan
from trainer.plan.placement import client_in_host
from _trainer_util import config, tiny

HOST = "driven from an engine host process beside the rank that starts them"


def test_auto_is_the_host_only_where_the_engines_have_gpus_of_their_own():
    assert [client_in_host(c, own) for c in ("auto", "trainer", "process")
            for own in (True, False)] == [True, False, False, False, True, True]


def test_the_dry_run_says_where_the_client_runs():
    assert HOST in memory_plan(paper(), shape(80)).note  # a GPU node's split: the host
    plain = memory_plan(paper(rollout__vllm__client="trainer"), shape(80)).note
    assert HOST not in plain and "4 vLLM engines of 1 GPU each on every node" in plain


def test_the_trainer_keeps_the_client_on_cpu_unless_asked():
    vllm = {"backend": "vllm"}
    assert not in_host(config(tiny(rollout=vllm)))  # CPU: no GPUs of the engines' own
    assert in_host(config(tiny(rollout={**vllm, "vllm": {"client": "process"}})))
