"""What Ctrl-C in `sweep --wait` advises (issue 52 point 4): stop only what runs, say what is
done with queued runs, and fit the terminal's width in whole words."""

from __future__ import annotations

from ablate.cli.waiting import stop_command, stopped_text, wrap
from ablate.studydir import RunState


def _run(i: int, state: str, job: str) -> RunState:
    return RunState(run_id=f"r{i}", name=f"v{i}", seed=0, state=state, step=None, job_id=job)


def test_queued_local_runs_are_left_out_of_the_kill_and_said_left_queued():
    states = [_run(0, "running", "slurm:11"), _run(1, "queued", "local:22"),
              _run(2, "done", "slurm:33")]
    text = stopped_text(states, "results/s", "s.yaml")
    assert "2 runs go on in the background (1 running, 1 queued)" in text, text
    assert "stop them: scancel 11;" in text and "33" not in text, text
    assert "the 1 queued local run is left queued" in text, text
    assert "status.json" not in text


def test_queued_slurm_jobs_are_dequeued_by_the_same_scancel_and_said_so():
    states = [_run(0, "running", "slurm:11_0"), _run(1, "queued", "slurm:11_1")]
    text = stopped_text(states, "results/s", "s.yaml")
    assert "stop them: scancel 11_0 11_1 (dequeues the 1 queued run)" in text, text
    assert stop_command([]) == ""


def test_the_advice_wraps_at_the_width_in_whole_words():
    text = stopped_text([_run(i, "running", f"slurm:{100 + i}") for i in range(9)],
                        "results/a_long_study_name", "a_long_study_name.yaml")
    for width in (60, 80, 100):
        lines = wrap(text, width).splitlines()
        assert len(lines) > 1 and all(len(x) <= width for x in lines), lines
        assert " ".join(lines) == text  # only spaces became line ends: no word split
