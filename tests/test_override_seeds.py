"""`ablate sweep --override seeds=[...]`: the study's seeds from the command line (the dress
rehearsal runs one seed of recipes/loss_agg.yaml this way). Dry runs only: ~4 s."""

from __future__ import annotations

import json

import pytest
from _study_util import ROOT, cli

from ablate.errors import InputError
from ablate.studies.study import load_study

LOSS_AGG = str(ROOT / "recipes" / "loss_agg.yaml")


def _expansion(*overrides: str) -> list[tuple[str, int, str]]:
    args = [x for o in overrides for x in ("--override", o)]
    # --executor local: where `sinfo` answers, no profile means Slurm's defaults (no GPUs),
    # on which the 8B study is refused (ablate/studies/gpu_need.py); seeds are the point here
    r = cli("sweep", LOSS_AGG, "--dry-run", "--json", "--executor", "local", *args, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [(x["name"], x["seed"], x["run_id"]) for x in json.loads(r.stdout)]


def test_seeds_override_runs_the_same_seed_0_runs_and_mixes_with_config_keys():
    full = _expansion()
    assert sorted({s for _, s, _ in full}) == [0, 1]  # the file's seeds: [0, 1]
    one = _expansion("seeds=[0]", "optim.lr=1.0e-6")
    assert [s for _, s, _ in one] == [0, 0, 0]
    assert [n for n, _, _ in one] == [n for n, s, _ in full if s == 0]
    # a config override changes the run ids; the seed override alone keeps seed 0's ids
    only = _expansion("seeds=[0]")
    assert [rid for *_, rid in only] == [rid for _, s, rid in full if s == 0]
    assert {rid for *_, rid in one}.isdisjoint(rid for *_, rid in only)
    assert [s for _, s, _ in _expansion("seeds=7")] == [7, 7, 7]  # one integer: one seed


@pytest.mark.parametrize("value,says", [("[0, 0]", "listed twice"), ("[]", "at least 1"),
                                        ("abc", "valid list"), ("[1.5]", "integer")])
def test_bad_seeds_override_is_one_line_naming_the_override(value, says):
    with pytest.raises(InputError) as e:
        load_study(LOSS_AGG, [f"seeds={value}"])
    msg = str(e.value)
    assert msg.startswith(f"--override seeds={value}: seeds:") and says in msg, msg
    assert "e.g. --override seeds=[0]" in msg and "\n" not in msg


def test_bad_seeds_override_from_the_cli_exits_2_without_traceback(tmp_path):
    r = cli("sweep", LOSS_AGG, "--override", "seeds=[0,0]", "--results", str(tmp_path), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--override seeds=[0,0]: seeds: seed 0 listed twice" in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_axis_override_runs_a_subset_as_the_same_runs():
    """`--override 'axes.KEY=[...]'`: some values of an axis (the rehearsal runs two of three),
    the same runs (ids) as the full study's for those values."""
    full = _expansion("seeds=[0]")
    two = _expansion("seeds=[0]", "axes.loss.aggregation=[prompt, token]")
    assert [n for n, _, _ in two] == ["loss.aggregation=prompt", "loss.aggregation=token"]
    assert {rid for *_, rid in two} <= {rid for *_, rid in full}


@pytest.mark.parametrize("item,says", [
    ("axes.loss.agg=[prompt]", "the study has no axis 'loss.agg' (its axes: loss.aggregation)"),
    ("axes.loss.aggregation=[]", "expected a non-empty list of values"),
    ("axes.loss.aggregation=prompt", "expected a non-empty list of values")])
def test_bad_axis_override_is_one_line_naming_it(item, says):
    with pytest.raises(InputError) as e:
        load_study(LOSS_AGG, [item])
    msg = str(e.value)
    assert msg.startswith(f"--override {item}: ") and says in msg and "\n" not in msg, msg
