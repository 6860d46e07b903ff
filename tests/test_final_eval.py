"""The end of a run uses what it holds (issue 40 point 5; trainer/loop/final_eval.py): the last
eval is dealt over every node's engines, a stop on any node stops every rank with each node's
finished chunks in the eval's record, the resumed attempt decodes only the rest and writes the
row a single node's eval would have written; and the generator stops where no batch would
take its groups (tests/test_pipeline_stream.py: GroupStream's `last`)."""

from __future__ import annotations

import json

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy

from trainer.loop.final_eval import share

SCRIPT = ROOT / "tests" / "_final_eval_script.py"


def test_chunks_are_dealt_by_stride_and_done_ones_skipped():
    chunks = [(a, a + 50, 7 + a * 16) for a in range(0, 1000, 50)]  # the paper's 20 chunks
    first, second = share(chunks, {}, 0, 2), share(chunks, {}, 1, 2)
    assert [c[0] for c in first] == list(range(0, 1000, 100))
    assert [c[0] for c in second] == list(range(50, 1000, 100))
    assert sorted(first + second) == chunks  # every chunk once, nobody's twice
    done = {0: [1, 16, 3, 3], 150: [2, 16, 3, 3]}
    assert [c[0] for c in share(chunks, done, 1, 2)][:2] == [50, 250]
    assert share(chunks, {}, None, 2) == []  # a rank without engines decodes nothing


@pytest.mark.slow
def test_last_eval_spreads_over_two_nodes_and_a_stop_loses_nothing(tmp_path):
    cache = session_cache()
    warm_proxy(cache, "__import__('_final_eval_script').config()")
    launch_ranks(SCRIPT, [str(tmp_path)], cache, world=2, nodes=2, timeout=300)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["stopped"] and r1["stopped"]  # the stop reached rank 1 only: both stopped
    assert len(r0["chunks"]) >= 4, r0["chunks"]  # several chunks for each node
    chunks = r0["chunks"]
    # Each node was dealt every other chunk; the stop on rank 1 ended its share before any
    # finished, so what the checkpoint keeps is rank 0's; the resume decodes only the rest.
    assert r0["decoded"][0] == chunks[0::2] and r1["decoded"][0] == chunks[1::2], (r0, r1)
    assert set(r0["after_stop"]) <= set(chunks[0::2]), r0
    assert r0["decoded"][1] == [a for a in chunks[0::2] if a not in r0["after_stop"]], r0
    assert r1["decoded"][1] == chunks[1::2], r1
    assert r0["finished"] and r1["finished"] and r0["cleared"]
    rows = r0["rows"]
    assert [row["step"] for row in rows] == [5], rows  # one row, written once, by rank 0
    assert rows[0]["eval/pass_rate"] == r0["reference"] > 0, rows  # one node's eval, exactly
