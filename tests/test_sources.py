"""Reading curves: long tables, TensorBoard logs, study results dirs (gather + parquet cache)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pandas as pd
import pytest

from ablate.errors import InputError
from ablate.analysis.gather import CACHE, gather
from ablate.analysis.sources import load

from _curves_util import curves_frame, write_study


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_long_tables_load_with_renamed_columns(tmp_path, suffix):
    df = curves_frame(seeds=2, n_points=10).rename(columns={"compute": "flops", "score": "acc",
                                                            "variant": "recipe"})
    p = tmp_path / f"t{suffix}"
    {".csv": lambda: df.to_csv(p, index=False),
     ".jsonl": lambda: df.to_json(p, orient="records", lines=True),
     ".parquet": lambda: df.to_parquet(p)}[suffix]()
    cur = load(p, x="flops", y="acc", by="recipe")
    assert cur.variants() == ["cispo", "ppo"]
    assert len(cur.frame) == len(df)
    np.testing.assert_allclose(cur.frame["score"], df["acc"])
    assert set(cur.frame["seed"]) == {0, 1}


def test_by_joins_several_columns(tmp_path):
    df = curves_frame(seeds=1, n_points=10)
    df["lr"] = np.where(df["variant"] == "ppo", "high", "low")
    p = tmp_path / "t.csv"
    df.to_csv(p, index=False)
    assert load(p, by="variant,lr").variants() == ["cispo/low", "ppo/high"]


def test_table_errors_name_file_and_column(tmp_path):
    """File, column, variant and the line an editor shows (the header is line 1)."""
    p = tmp_path / "t.csv"
    curves_frame(seeds=1, n_points=10).to_csv(p, index=False)
    with pytest.raises(InputError, match=r"t.csv: no column 'gpu_hours' for --x"):
        load(p, x="gpu_hours")
    df = pd.read_csv(p)
    df.loc[3, "score"] = np.inf
    df.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"column 'score' has NaN/inf \(variant 'cispo', line 5\)"):
        load(p)
    df.loc[3, "score"] = 1.5
    df.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"t.csv: column 'score' line 5 is 1.5 \(variant 'cispo'\); "
                                         r"scores are pass rates in \[0, 1\]"):
        load(p)
    df.loc[3, "score"] = 0.5
    df.loc[2, "compute"] = -1.0
    df.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"t.csv: column 'compute' line 4 is -1 \(variant 'cispo'\); "
                                         "compute must be >= 0"):
        load(p)
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "missing.csv")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(InputError, match="unsupported file type"):
        load(tmp_path / "x.txt")


def test_tensorboard_event_dirs(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    df = curves_frame(seeds=2, n_points=12)
    for (v, s), g in df.groupby(["variant", "seed"]):
        w = SummaryWriter(str(tmp_path / v / f"seed{s}"))
        for step, (c, y) in enumerate(zip(g["compute"], g["score"])):
            w.add_scalar("eval/pass_rate", y, step)
            w.add_scalar("gpu_hours", c, step)
        w.close()
    cur = load(tmp_path, x="gpu_hours")
    assert sorted(cur.variants()) == ["cispo", "ppo"]
    assert sorted(set(cur.frame["seed"])) == [0, 1]
    assert len(cur.frame) == len(df)
    g = cur.frame[(cur.frame["variant"] == "ppo") & (cur.frame["seed"] == 1)].sort_values("compute")
    ref = df[(df["variant"] == "ppo") & (df["seed"] == 1)]
    np.testing.assert_allclose(g["score"], ref["score"], rtol=1e-6)  # TB stores float32
    assert load(tmp_path).x == "gpu_hours"  # the compute tag is auto-detected
    by_step = load(tmp_path, x="step")
    assert by_step.x == "step" and by_step.frame["compute"].max() == 12
    with pytest.raises(InputError, match="no metric 'reward' for --y"):
        load(tmp_path, y="reward")


def test_gather_study_dir_and_cache(tmp_path):
    df = curves_frame(seeds=2, n_points=20)
    d = write_study(tmp_path, df)
    cur = load(d)
    assert (cur.x, cur.y) == ("gpu_hours", "eval/pass_rate")
    assert len(cur.frame) == len(df)
    cache = d / CACHE
    assert cache.is_file()
    frame = pd.read_parquet(cache)
    assert {"variant", "seed", "run_id", "state", "step", "flops", "eval/pass_rate"} <= set(frame)
    assert set(frame["state"]) == {"done"}
    # reused while fresh: tamper with the cache and see it come back as is
    frame.loc[0, "step"] = -7
    frame.to_parquet(cache)
    assert gather(d)["step"].iloc[0] == -7
    # a run that appends makes it stale
    time.sleep(0.01)
    run0 = d / "run0000" / "metrics.jsonl"
    with open(run0, "a") as f:
        f.write(json.dumps({"step": 999, "gpu_hours": 0.06, "eval/pass_rate": 0.6}) + "\n")
    os.utime(run0, (time.time() + 5, time.time() + 5))
    g = gather(d)
    assert g["step"].iloc[0] == 0 and 999 in set(g["step"])


def test_gather_tolerates_partial_last_line_but_names_a_corrupt_one(tmp_path):
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=10))
    run0 = d / "run0000" / "metrics.jsonl"
    with open(run0, "a") as f:
        f.write('{"step": 110, "gpu_hours": 0.0')  # being written
    g = gather(d, write_cache=False)
    assert len(g) == 22 and 110 not in set(g["step"])
    lines = run0.read_text().splitlines()
    lines[3] = "{broken"
    run0.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(InputError, match=r"run0000/metrics.jsonl:4: not a JSON object"):
        gather(d, write_cache=False)


def test_study_yaml_fit_defaults_and_missing_rows(tmp_path):
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=10))
    (d / "study.yaml").write_text("name: toy\nfit: {x: flops, y: eval/pass_rate, min_compute: 1e12}\n")
    run0 = d / "run0000" / "metrics.jsonl"
    with open(run0, "a") as f:  # a training-only line (no eval) is not a point
        f.write(json.dumps({"step": 200, "flops": 1e15, "train/loss": 0.3}) + "\n")
    cur = load(d)
    assert cur.x == "flops" and cur.defaults["min_compute"] == 1e12
    assert len(cur.frame) == 22


def test_blank_cells_are_dropped_and_counted(tmp_path):
    # W&B/TensorBoard exports leave a cell blank where a metric was not logged at that step
    df = curves_frame(seeds=1, n_points=10)
    df.loc[[2, 5], "score"] = np.nan
    df.loc[7, "compute"] = np.nan
    p = tmp_path / "t.csv"
    df.to_csv(p, index=False)
    cur = load(p)
    assert cur.dropped == 3 and len(cur.frame) == len(df) - 3
    assert cur.frame["score"].notna().all() and cur.frame["compute"].notna().all()


def test_one_curve_without_variant_column_is_one_variant(tmp_path):
    df = curves_frame(seeds=1, n_points=10)
    one = df[df["variant"] == "ppo"].drop(columns=["variant", "seed"])
    p = tmp_path / "my_run.csv"
    one.to_csv(p, index=False)
    cur = load(p)
    assert cur.variants() == ["my_run"] and len(cur.frame) == len(one)
    with pytest.raises(InputError, match="no column 'recipe' for --by"):
        load(p, by="recipe")  # an explicit --by still has to exist


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_names_are_text_in_every_table_format(tmp_path, suffix):
    """A variant called like a missing value, or "007", is read as written; a blank is an error."""
    df = curves_frame(seeds=1, n_points=10)
    df["variant"] = df["variant"].map({"cispo": "null", "ppo": "007"})
    p = tmp_path / f"t{suffix}"
    write = {".csv": lambda d: d.to_csv(p, index=False),
             ".jsonl": lambda d: d.to_json(p, orient="records", lines=True),
             ".parquet": lambda d: d.to_parquet(p)}[suffix]
    write(df)
    assert load(p).variants() == ["null", "007"]
    df.loc[3, "variant"] = None
    write(df)
    where = {".csv": "line 5", ".jsonl": "line 4", ".parquet": "row 4"}[suffix]  # as an
    with pytest.raises(InputError, match=f"column 'variant' {where} is blank"):  # editor shows
        load(p)


def test_y_range_maps_and_refusals_name_it(tmp_path):
    df = curves_frame(seeds=1, n_points=10)
    p = tmp_path / "r.csv"
    df.assign(score=2 * df["score"] - 1).to_csv(p, index=False)
    with pytest.raises(InputError, match=r"--y-range -1 1 \(rewards"):
        load(p)
    cur = load(p, y_range=(-1, 1))
    assert np.allclose(cur.frame["score"].to_numpy(), df["score"].to_numpy())
    assert cur.y_range == (-1.0, 1.0) and any("mapped from [-1, 1]" in n for n in cur.readings)
    for bad in [(1, 1), (0, float("inf")), ("a", 1)]:
        with pytest.raises(InputError, match="--y-range"):
            load(p, y_range=bad)
