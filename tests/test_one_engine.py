"""One generation service per job: a 2-rank ppo_off_policy job on the vllm backend starts one
vLLM engine (rank 0's), and every rank trains on rank 0's batches.

Before, every rank of such a job built its own engine on the same generation GPUs (PPOOffPolicy
made a generator on each rank). The engine runs in rank 0's engine host (`rollout.vllm.client:
process`, trainer/generation/host.py), as on a GPU node. Real processes: 2 gloo ranks in the vllm venv, the trainer's
own run and source (tests/_one_engine_script.py). About 1 min on the 2-core machine.
"""

from __future__ import annotations

import json

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy
from test_vllm import _venv_python


@pytest.mark.vllm
def test_ppo_off_policy_two_ranks_share_rank0s_engine(tmp_path):
    # The model once, before the ranks: with an empty cache (this test run alone) both ranks
    # would build it at once (tests/test_two_nodes.py saw that race)
    warm_proxy(session_cache(), "__import__('_one_engine_script').job_config()",
               python=_venv_python())
    launch_ranks(ROOT / "tests" / "_one_engine_script.py", [str(tmp_path)],
                 cache=session_cache(), world=2, timeout=400, python=_venv_python(),
                 extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # one engine for the job, rank 0's, in its engine host: the big generation's generate()
    # calls and every push (rank 1 joining nothing: no ZeRO-3 here) cross the host's socket
    assert r0["engine"] == "HostedGenerator" and r1["engine"] is None
    assert r0["digests"] == r1["digests"]  # every rank holds rank 0's batches
    assert r0["digests"][0] != r0["digests"][1] != r0["digests"][2]  # 3 different batches
