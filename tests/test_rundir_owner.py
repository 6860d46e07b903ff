"""trainer.rundir is the one reader and writer of a run dir's files.

One torn-line rule for every reader (the run's own reader, the study gatherer, the foreign JSONL
log reader, `ablate status`, `ablate tune`): a metrics file cut at any byte of its last line
reads as if that line were not there; a bad line elsewhere is a one-line error naming the file
and line. Concurrent writers (64 processes appending rows to one run's metrics and recording
submissions in one study) lose and duplicate nothing. The trainer imports nothing of ablate's
and learns the run's identity from the file the study store hands it. `ablate tune` ranks its
finished trials on one fit window.
"""

from __future__ import annotations

import ast
import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
from _study_util import ROOT, cli

from trainer import rundir

ROWS = [{"step": s, "samples": 8 * s, "tokens": 80 * s, "flops": 1e9 * s, "gpu_hours": s / 1e3,
         "eval/pass_rate": round(0.1 + 0.7 * s / (s + 10), 6), "train/loss": -0.01 * s}
        for s in range(1, 9)]
NAME = "loss.aggregation=prompt"


def _study(tmp_path: Path, text: str) -> Path:
    """A study results dir of one run whose metrics.jsonl holds `text`."""
    study = tmp_path / "st"
    run = study / "r0"
    run.mkdir(parents=True)
    (study / "variants.json").write_text(json.dumps([{"run_id": "r0", "name": NAME, "seed": 0}]))
    (run / rundir.METRICS).write_text(text)
    return study


def _readers(study: Path) -> dict[str, object]:
    """What each reader of the project makes of the run's metrics file."""
    from ablate.analysis.gather import gather
    from ablate.readers.jsonl_logs import read_run_logs
    from ablate.studies.status import last_step
    from ablate.studies.tune import Objective, _score

    run = study / "r0"
    rows = rundir.read_metrics(run)
    frame = gather(study, use_cache=False, write_cache=False)
    logs = read_run_logs(run / rundir.METRICS).frame
    return {"rows": rows,
            "gather": frame.drop(columns=["variant", "seed", "run_id", "state"]).to_dict("records"),
            "logs": logs["eval/pass_rate"].tolist() if len(logs) else [],
            "status": last_step(run, {}),
            "tune": _score(run, Objective()) if rows else None}


@pytest.mark.slow
def test_a_cut_anywhere_in_the_last_line_reads_as_without_it(tmp_path):
    whole = [json.dumps(r) + "\n" for r in ROWS]
    head, last = "".join(whole[:-1]), whole[-1]
    study = _study(tmp_path, head)
    without = _readers(study)
    assert without["rows"] == ROWS[:-1] and without["status"] == ROWS[-2]["step"]
    assert without["gather"] == ROWS[:-1]
    for k in range(len(last) - 1):  # every cut before the row is whole (its "}" at -2)
        (study / "r0" / rundir.METRICS).write_text(head + last[:k])
        assert _readers(study) == without, f"cut at byte {k} of the last line"
    (study / "r0" / rundir.METRICS).write_text(head + last[:-1])  # whole row, no newline yet
    got = _readers(study)
    assert got["rows"] == ROWS and got["status"] == ROWS[-1]["step"] and got != without


@pytest.mark.parametrize("bad", ['{"step": 3, "eval/pass_rate": 0.3', "[1, 2]", "\x00\x00"])
def test_a_bad_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path, bad):
    from ablate.analysis.gather import gather
    from ablate.errors import InputError

    lines = [json.dumps(r) for r in ROWS]
    lines[3] = bad
    study = _study(tmp_path, "\n".join(lines) + "\n")
    path = study / "r0" / rundir.METRICS
    with pytest.raises(rundir.MetricsError, match=rf"^{path}:4: ") as e:
        rundir.read_metrics(study / "r0")
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=rf"^{path}:4: "):
        gather(study, use_cache=False, write_cache=False)


@pytest.mark.slow
def test_cli_names_the_damaged_line(tmp_path):
    """Through the installed entry point: one line, exit 2, nothing cached."""
    lines = [json.dumps(r) for r in ROWS]
    lines[2] = lines[2][:20]
    study = _study(tmp_path, "\n".join(lines) + "\n")
    r = cli("fit", str(study), "--json")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == (f"error: {study / 'r0' / rundir.METRICS}:3: not a JSON object "
                                "(Unterminated string starting at: column 13); each line must be "
                                "one JSON object")
    assert not (study / "metrics.parquet").exists()


# -- concurrent writers --------------------------------------------------------------------
WRITERS, ROWS_EACH = 64, 6


def _append_rows(run_dir: str, writer: int, barrier) -> None:
    barrier.wait()  # all 64 start together: the appends really overlap
    for k in range(ROWS_EACH):
        # rows of up to ~12 KB: past the 4 KiB pipe-atomicity size and Python's 8 KiB buffer
        rundir.append_metrics(Path(run_dir), {"step": k, "writer": writer,
                                              "pad": "x" * (37 * writer * k % 12000)})


def _record(study: str, writer: int, barrier) -> None:
    from ablate.studydir import StudyStore

    barrier.wait()
    store = StudyStore(Path(study))
    store.record_submissions({f"run{writer}": f"job{writer}"}, "local")
    store.record_submissions({"shared": f"shared{writer}"}, "local")


def _in_parallel(target, path: Path) -> None:
    ctx = mp.get_context("fork")  # cheap: no re-import per process
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=target, args=(str(path), w, barrier)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS


@pytest.mark.slow
def test_64_processes_appending_to_one_run_lose_and_duplicate_nothing(tmp_path):
    _in_parallel(_append_rows, tmp_path)
    rows = rundir.read_metrics(tmp_path)  # no line torn or interleaved: it would raise
    got = sorted((r["writer"], r["step"]) for r in rows)
    assert got == [(w, k) for w in range(WRITERS) for k in range(ROWS_EACH)]
    assert all(len(r["pad"]) == 37 * r["writer"] * r["step"] % 12000 for r in rows)


@pytest.mark.slow
def test_64_processes_recording_submissions_in_one_study_lose_nothing(tmp_path):
    from ablate.studydir import StudyStore

    _in_parallel(_record, tmp_path)
    subs = StudyStore(tmp_path).submissions()
    assert {k: v["jobs"] for k, v in subs.items() if k != "shared"} == {
        f"run{w}": [f"job{w}"] for w in range(WRITERS)}
    assert subs["shared"]["attempts"] == WRITERS
    assert sorted(subs["shared"]["jobs"]) == sorted(f"shared{w}" for w in range(WRITERS))


# -- states, identity, layering ------------------------------------------------------------
def test_status_states_are_the_enum_and_final_ones_are_declared_once(tmp_path):
    from ablate.studies import status

    rundir.write_status(tmp_path, "diverged", 7)
    assert rundir.read_state(tmp_path) is rundir.RunState.DIVERGED
    assert json.loads((tmp_path / rundir.STATUS).read_text())["state"] == "diverged"
    assert status.FINAL is rundir.FINAL_STATES and rundir.is_final("done")
    assert not rundir.is_final("running") and not rundir.is_final(None)
    with pytest.raises(ValueError):
        rundir.write_status(tmp_path, "finished", 7)
    assert rundir.read_state(tmp_path) is rundir.RunState.DIVERGED  # nothing written


def test_the_store_hands_the_run_its_identity_and_the_trainer_reads_no_study_file(tmp_path):
    from ablate.studies.expand import Variant
    from ablate.study_record import StudyRecord
    from ablate.studydir import StudyStore
    from trainer import trackers
    from trainer.config import TrainConfig

    cfg = TrainConfig()
    store = StudyStore(tmp_path / "loss_agg")
    store.write_study("name: loss_agg\n", StudyRecord(name="loss_agg"),
                      [Variant("abc123", NAME, 2, cfg)])
    run = store.run_dir("abc123")
    assert rundir.read_identity(run) == {"study": "loss_agg", "variant": NAME, "seed": 2}
    assert TrainConfig.model_validate(rundir.read_config(run)) == cfg
    ident = trackers.identify(cfg, run)
    assert (ident.name, ident.study, ident.seed, ident.root) == (NAME, "loss_agg", 2, run.parent)
    (run / rundir.IDENTITY).unlink()  # variants.json is still beside it: not read any more
    assert trackers.identify(cfg, run).name == "abc123"


def test_trainer_imports_nothing_of_ablate():
    for f in sorted((ROOT / "trainer").rglob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "ablate" or n.startswith("ablate.") for n in names), f
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "variants.json" not in node.value, f


# -- tune: one window for every trial -------------------------------------------------------
def test_tune_ranks_its_trials_on_one_shared_window(tmp_path):
    """Two trials of one underlying curve; trial 0 has an early transient its own shape test
    skips, trial 1 none. Both are refitted from the later start, as `compare` would."""
    from ablate.analysis.fit import sigmoid
    from ablate.analysis.fitters import fit_sigmoid, shape_start
    from ablate.studies.tune import Objective
    from ablate.studies.tune_ranking import rank_on_shared_window

    steps = np.arange(1, 61)
    c = steps * 1e-3
    rng = np.random.default_rng(0)
    base = np.array([float(sigmoid(x, 0.8, 1.5, 0.01, 0.1)) for x in c])
    curves = [base + rng.normal(0, 0.004, c.size) + 0.25 * np.exp(-steps / 2.0),
              base + rng.normal(0, 0.004, c.size)]
    trials = []
    for n, y in enumerate(curves):
        d = tmp_path / f"t{n}"
        d.mkdir()
        for s, x, v in zip(steps, c, y):
            rundir.append_metrics(d, {"step": int(s), "gpu_hours": float(x),
                                      "eval/pass_rate": float(v)})
        trials.append({"number": n, "state": "COMPLETE", "value": 0.5, "run_dir": str(d)})
    starts = [shape_start(c, y) for y in curves]
    assert starts[0] > (starts[1] or 0)  # the trials' own windows differ: the test means it
    best, window = rank_on_shared_window(trials, Objective(reduce="asymptote"), str(tmp_path))
    assert window["rule"] == "shared" and window["min_compute"] == starts[0]
    for t, y in zip(trials, curves):
        shared = fit_sigmoid(c, y, min_compute=starts[0], n_boot=400, seeds=np.zeros(c.size))
        assert t["value"] == pytest.approx(shared.A, abs=1e-9) and t["search_value"] == 0.5
        assert t["A_ci"][0] <= t["value"] <= t["A_ci"][1]
    assert best is max(trials, key=lambda t: t["value"])


@pytest.mark.slow
def test_ablate_tune_reports_the_shared_window_and_ranks_by_it(tmp_path):
    """Through `ablate tune` (2 trials of the synthetic entry, ~7 s): the best trial and every
    value come from the fits on the one window the output states."""
    from ablate.analysis.fitters import fit_sigmoid

    space = tmp_path / "space.yaml"
    space.write_text(f"""name: tw
base: {ROOT / 'recipes' / 'proxy.yaml'}
overrides: {{engine.threads: 1}}
budget: {{steps: 40}}
params: {{optim.lr: {{low: 1.0e-4, high: 4.0e-4}}}}
objective: {{metric: eval/pass_rate, reduce: asymptote, x: gpu_hours}}
n_trials: 2
seed: 3
""")
    r = cli("tune", str(space), "--results", str(tmp_path / "res"), "--entry",
            "_stage_entry:synthetic_run", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["window"]["rule"] == "shared" and set(out["window"]["starts"]) == {
        "trial 0", "trial 1"}
    for t in out["trials"]:
        rows = rundir.read_metrics(Path(t["run_dir"]))
        c = np.array([x["gpu_hours"] for x in rows])
        y = np.array([x["eval/pass_rate"] for x in rows])
        fit = fit_sigmoid(c, y, min_compute=out["window"]["min_compute"], n_boot=400,
                          seeds=np.zeros(c.size))
        assert t["value"] == pytest.approx(fit.A, abs=1e-9) and t["search_value"] is not None
    assert out["best"]["number"] == max(out["trials"], key=lambda t: t["value"])["number"]
