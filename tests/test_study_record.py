"""One record of a study: `ablate sweep` writes the study as resolved (study.json: name, the
fit with its trainer's columns, the trainer and stages blocks) and every reader of a study dir
reads it through ablate.studydir.read_record; a study dir written before the record (study.yaml
alone) still reads as it did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _submitted(tmp_path: Path) -> Path:
    """The quickstart's study dir as `run_sweep` writes it, without submitting a job."""
    from ablate.studies.sweep import plan_sweep, study_record, study_text

    plan = plan_sweep(ROOT / "recipes" / "quickstart.yaml", executor="local",
                      results=tmp_path / "results")
    plan.store.write_study(study_text(plan.loaded), study_record(plan.loaded), plan.variants)
    return plan.store.root


def test_submit_writes_the_resolved_study_and_readers_read_it_not_the_yaml(tmp_path):
    from ablate.analysis.gather import study_fit
    from ablate.studydir import read_record

    d = _submitted(tmp_path)
    rec = json.loads((d / "study.json").read_text())
    assert rec["name"] == "quickstart" and rec["fit_resolved"] is True
    assert rec["fit"] == {"x": "flops", "y": "eval/pass_rate", "min_compute": None,
                          "max_compute": None}
    assert rec["trainer"]["kind"] == "ablate" and rec["stages"] is None
    (d / "study.yaml").write_text("fit: {x: [not, parsed]\n")  # broken: nobody parses it now
    assert read_record(d).name == "quickstart"
    assert study_fit(d).axes() == ("flops", "eval/pass_rate")


def test_an_older_study_dir_with_study_yaml_alone_reads_as_before(tmp_path):
    """What older code wrote: study.yaml verbatim, no study.json. Its fit is resolved by the
    trainer's adapter when read (TRL's columns where the study names none), numbers YAML 1.1
    reads as text are numbers, the stages block keeps its keys."""
    from ablate.analysis.gather import study_fit
    from ablate.studydir import adaptive_record, read_record

    d = tmp_path / "old"
    d.mkdir()
    (d / "study.yaml").write_text("# an old study\nname: old\ndescription: Does it read?\n"
                                  "base: ../recipes/proxy.yaml\n"
                                  "fit: {x: flops, min_compute: 1e9}\n"
                                  "stages: {budgets: [{flops: 1e10}]}\n")
    (d / "stages.json").write_text(json.dumps({"budgets": [], "decisions": []}))
    rec = read_record(d)
    assert (rec.name, rec.description, rec.base) == ("old", "Does it read?", "../recipes/proxy.yaml")
    fit = study_fit(d)
    assert (fit.x, fit.y, fit.min_compute) == ("flops", "eval/pass_rate", 1e9)
    assert adaptive_record(d)[1]["scale_winner"] is False  # StageSpec's default, said once
    (d / "study.yaml").write_text("name: trl_old\ntrainer: {kind: trl}\n")
    assert study_fit(d).axes() == ("num_tokens", "eval_reward")
    (d / "study.yaml").write_text("name: cmd\ntrainer: {kind: command, step_cost: 2}\n")
    assert study_fit(d).x == "compute" and study_fit(d).y is None  # its log names the score
    (d / "study.yaml").write_text("name: bad\nfit: {min_compute: soon}\n")
    with pytest.raises(InputError, match=r"study.yaml: fit.min_compute = 'soon' is not a number"):
        study_fit(d)
    (d / "study.yaml").write_text("name: [unclosed\n")
    with pytest.raises(InputError, match=r"study.yaml: not valid YAML"):
        read_record(d)
    (d / "study.yaml").unlink()
    assert read_record(d).name == "old" and study_fit(d).axes() == ("gpu_hours", "eval/pass_rate")


def test_a_damaged_record_is_one_line_naming_it(tmp_path):
    from ablate.studydir import read_record

    (tmp_path / "study.json").write_text("{\"name\": 3")
    with pytest.raises(InputError, match=r"study.json: unreadable study record"):
        read_record(tmp_path)
