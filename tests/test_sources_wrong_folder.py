"""Issue 51 point 5: a folder one level off a study is never read as a generic log."""
from pathlib import Path

import pytest

from ablate.analysis.sources import study_meant
from tests._cli import ablate_script


def _study(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "variants.json").write_text("[]")
    return d


def test_folder_of_one_study_means_that_study(tmp_path):
    s = _study(tmp_path / "results" / "mine")
    (tmp_path / "results" / "notes").mkdir()
    assert study_meant(tmp_path / "results") == s


def test_runs_folder_means_its_study(tmp_path):
    s = _study(tmp_path / "results" / "mine")
    (s / "runs").mkdir()
    assert study_meant(s / "runs") == s


def test_plain_log_dir_is_left_alone(tmp_path):
    (tmp_path / "logs").mkdir()
    assert study_meant(tmp_path / "logs") == tmp_path / "logs"


@pytest.mark.slow
def test_compare_folder_of_studies_names_candidates(tmp_path):
    _study(tmp_path / "results" / "a")
    _study(tmp_path / "results" / "b")
    r = ablate_script("compare", "results", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "did you mean" in err[0]
    assert "results/a" in err[0] and "results/b" in err[0]


@pytest.mark.slow
def test_compare_study_file_names_its_results(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mystudy.yaml").write_text("name: named\n")
    r = ablate_script("compare", "recipes/mystudy.yaml", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "study file" in err[0] and "results/named" in err[0]
    assert "unsupported file type" not in err[0]


def test_one_run_dir_of_a_study_stays_that_run(tmp_path):
    s = _study(tmp_path / "results" / "mine")
    (s / "run-0").mkdir()
    (s / "run-0" / "metrics.jsonl").write_text("")
    assert study_meant(s / "run-0") == s / "run-0"


def test_status_reads_a_folder_one_level_off_as_its_study(tmp_path):
    """`ablate status results` (one study inside) answers for that study, as compare does; a
    folder of two studies is refused naming both (in process: a fast test)."""
    from tests._cli import ablate

    s = _study(tmp_path / "results" / "mine")
    r = ablate("status", str(tmp_path / "results"), "--json")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r
    assert ablate("status", str(s)).stdout == ablate("status", str(tmp_path / "results")).stdout
    _study(tmp_path / "results" / "other")
    r = ablate("status", str(tmp_path / "results"))
    assert r.returncode == 2 and "did you mean" in r.stderr and "mine" in r.stderr, r
