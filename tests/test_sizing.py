"""`ablate sweep STUDY --within 14d` (issue 40): a study sized to its time and nodes, written as
a study YAML that `ablate sweep` runs as is (checked with the real loader and dry run), or one
line saying what would fit. Numbers come from the time plan, so the tests check the proposal
against the plan of the file it writes, and each suggestion by taking it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _cli import ablate

from ablate.analysis import A_MARGIN
from ablate.analysis.resolution import MAX_USEFUL_SEEDS, a_margin
from ablate.studies.expand import expand
from ablate.studies.sizing import parse_within
from ablate.studies.study import load_study

ROOT = Path(__file__).resolve().parents[1]
LOSS_AGG = ROOT / "recipes" / "loss_agg.yaml"
PROFILE = ("executor: slurm\ngpu_memory_gib: 80\ngpu_model: h100\nslurm:\n  partition: gpu\n"
           "  nodes: 2\n  tasks_per_node: 4\n  gpus_per_node: 8\n  time_min: 240\n"
           "  signal_delay_s: 300\n  array_parallelism: 4\n  study_nodes: {n}\n")


def profile(tmp_path: Path, nodes: int) -> Path:
    p = tmp_path / f"gpu{nodes}.yaml"
    p.write_text(PROFILE.format(n=nodes))
    return p


def one_line(r) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r
    return lines[0]


def test_durations_and_the_margin_rule():
    assert parse_within("14d") == 336 and parse_within("36h") == 36
    assert parse_within("2w") == 336 and parse_within("90min") == 1.5
    assert parse_within("1.5d") == 36
    margins = [a_margin(k) for k in range(1, 7)]
    assert margins == sorted(margins, reverse=True) and len(set(margins)) == 6
    assert margins[0] == pytest.approx(0.0404, abs=5e-4)  # one seed: 2.8 x 0.0102 x sqrt(2)
    assert a_margin(MAX_USEFUL_SEEDS) <= A_MARGIN < a_margin(MAX_USEFUL_SEEDS - 1)


@pytest.mark.parametrize("bad", ["14", "2x", "-3d", "0d", ""])
def test_a_bad_duration_is_one_line(tmp_path, bad):
    line = one_line(ablate("sweep", LOSS_AGG, "--profile", profile(tmp_path, 16),
                           f"--within={bad}", cwd=tmp_path))
    assert "expected a duration with a unit, e.g. 14d" in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["gpu16.yaml"]  # nothing written


def test_proposal_is_a_study_the_sweep_runs_as_planned(tmp_path):
    r = ablate("sweep", LOSS_AGG, "--profile", profile(tmp_path, 16), "--within", "3w",
               "--json", cwd=tmp_path)
    assert r.returncode == 0, r
    got = json.loads(r.stdout)
    p = got["proposal"]
    assert p["study_wall_h"] <= 21 * 24 and p["paper_stage_budget"], p
    assert p["budget_gpu_hours"] in (4000, 3500) and got["stage"] == "single-axis"
    assert p["margin_A"] == pytest.approx(a_margin(p["seeds"]), abs=1e-4)
    assert "4 times in 5 at 95%" in p["how"]
    out = tmp_path / "loss_agg_within_3w.yaml"
    assert got["wrote"][0] == str(Path("loss_agg_within_3w.yaml"))
    assert out.read_text() == got["study_yaml"]
    # the real loader: same axes, the proposal's seeds and budget
    loaded = load_study(out)
    variants = expand(loaded)
    assert len(variants) == 3 * p["seeds"] == p["runs"]
    assert {v.config.budget.gpu_hours for v in variants} == {p["budget_gpu_hours"]}
    assert {v.config.loss.aggregation for v in variants} == {"sample", "prompt", "token"}
    # the dry run of the written file plans the same runs on the same nodes
    dry = ablate("sweep", out, "--dry-run", "--json", cwd=tmp_path)
    assert dry.returncode == 0, dry
    runs = json.loads(dry.stdout)
    assert {x["launch"]["nodes"] for x in runs} == {p["nodes_per_run"]}
    assert {x["launch"]["runs_at_once"] for x in runs} == {p["runs_at_once"]}
    walls = {round(x["resources"]["wall_h"], 1) for x in runs}
    assert max(walls) == pytest.approx(p["run_wall_h"], abs=0.1), (walls, p)
    # one definition of GPU-hours (issue 52 point 1): what --within says a run and the study
    # hold is what the dry run of its study plans (GPUs held x wall), not the training budget
    held = [x["resources"]["gpu_hours"] for x in runs]
    assert max(held) == pytest.approx(p["run_gpu_hours_held"], abs=0.1), (held, p)
    assert sum(held) == pytest.approx(p["study_gpu_hours_held"], abs=0.5), (held, p)
    assert p["run_gpu_hours_held"] > p["budget_gpu_hours"], p  # evals, starts, requeues held
    text = ablate("sweep", out, "--dry-run", cwd=tmp_path).stdout
    text = " ".join(text[text.rindex("\nstudy: ") + 1:].split())  # the last fact, unfolded
    assert f"{p['runs_at_once']} at once" in text, text


def test_text_names_every_choice_and_more_time_buys_seeds(tmp_path):
    prof = profile(tmp_path, 16)
    r = ablate("sweep", LOSS_AGG, "--profile", prof, "--within", "3w", cwd=tmp_path)
    assert r.returncode == 0, r
    out = r.stdout
    for what in ("budget: the paper's single-axis stage", "seeds: ", "nodes: ",
                 "time: ~", "margin on A: 0.0", "<- proposed", "wrote loss_agg_within_3w.yaml"):
        assert what in out, (what, out)
    long = json.loads(ablate("sweep", LOSS_AGG, "--profile", prof, "--within", "8w",
                             "--json", cwd=tmp_path).stdout)["proposal"]
    short = json.loads(ablate("sweep", LOSS_AGG, "--profile", prof, "--within", "3w",
                              "--json", cwd=tmp_path).stdout)["proposal"]
    assert long["seeds"] > short["seeds"] and long["margin_A"] < short["margin_A"], (long, short)
    assert Path(tmp_path / "loss_agg_within_8w.yaml").is_file()


def test_nothing_fits_says_the_time_and_the_nodes_that_would(tmp_path):
    """On the shipped profile's 2 nodes (assumed: `sinfo` has no partition gpu here) the
    paper's smallest stage takes weeks; both suggestions work when taken."""
    line = one_line(ablate("sweep", LOSS_AGG, "--profile", "slurm_gpu", "--within", "14d",
                           cwd=tmp_path))
    assert "no study of its 3 variants fits 14.0 d on assumed 2 nodes (the profile's" in line
    assert "the paper's smallest single-axis stage (1 seed x 3,500 GPU-hours" in line, line
    days = int(re.search(r"allow --within (\d+)d", line).group(1))
    assert days > 14, line
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing written
    took = ablate("sweep", LOSS_AGG, "--profile", "slurm_gpu", "--within", f"{days}d",
                  "--json", cwd=tmp_path)
    assert took.returncode == 0, took
    # more nodes are offered only where some number of them fits (a run's own wall, evals
    # included, may not shrink below 14 d on any): then taking it works
    nodes = re.search(r"or (\d+) nodes \(slurm.study_nodes: \1\)", line)
    if nodes:
        more = ablate("sweep", LOSS_AGG, "--profile", profile(tmp_path, int(nodes.group(1))),
                      "--within", "14d", "--json", cwd=tmp_path)
        assert more.returncode == 0, more


def test_other_nodes_per_run_come_with_their_profile_and_overrides_are_kept(tmp_path):
    r = ablate("sweep", LOSS_AGG, "--profile", profile(tmp_path, 16), "--within", "14d",
               "--override", "optim.lr=1.0e-6", "--out", tmp_path / "mine.yaml", "--json",
               cwd=tmp_path)
    assert r.returncode == 0, r
    got = json.loads(r.stdout)
    text = (tmp_path / "mine.yaml").read_text()
    assert "optim.lr: 1.0e-06" in text and "name: loss_agg_within_14d" in text, text
    loaded = load_study(tmp_path / "mine.yaml")
    assert {v.config.optim.lr for v in expand(loaded)} == {1.0e-6}
    if got["proposal"]["nodes_per_run"] != 2:  # the profile's own: no copy needed
        assert got["wrote"][1].endswith("mine.profile.yaml") and got["profile_yaml"]
        assert "profile: mine.profile.yaml" in text
        assert f"nodes: {got['proposal']['nodes_per_run']}" in got["profile_yaml"]


@pytest.mark.slow  # ~2.5 s of CPU: with evals on every node's engines (issue 46) no node
# count is refused any more, so the search plans every candidate shape of both studies
def test_leave_one_out_is_sized_at_the_papers_16k(tmp_path):
    study = tmp_path / "loo2.yaml"
    study.write_text("name: loo2\nbase: scalerl.yaml\nmode: leave_one_out\ncomponents:\n"
                     "  loss_agg: {loss.aggregation: sample}\n"
                     "  adv_norm: {advantage.normalization: prompt}\nseeds: [0]\n")
    r = ablate("sweep", study, "--profile", profile(tmp_path, 64), "--within", "12w", "--json",
               cwd=tmp_path)
    assert r.returncode == 0, r
    got = json.loads(r.stdout)
    assert got["stage"] == "leave-one-out" and got["proposal"]["budget_gpu_hours"] == 16000
    assert got["proposal"]["runs"] == 3 * got["proposal"]["seeds"]  # the base + 2 reverted
    # the shipped one: its PPO-off-policy variant stepped 6 h on one shared engine, more than a
    # job; it now generates on every node's engines (issue 46 point 1), so it is sized too
    r = ablate("sweep", ROOT / "recipes" / "loo.yaml", "--profile", profile(tmp_path, 64),
               "--within", "8w", "--json", cwd=tmp_path)
    assert r.returncode == 0, r
    got = json.loads(r.stdout)
    assert got["stage"] == "leave-one-out" and got["proposal"]["budget_gpu_hours"] == 16000


def test_what_it_cannot_size_is_one_line(tmp_path):
    line = one_line(ablate("sweep", LOSS_AGG, "--executor", "local", "--within", "14d",
                           cwd=tmp_path))
    assert "--within: it sizes Slurm runs on GPUs" in line and "go to local" in line, line
    line = one_line(ablate("sweep", LOSS_AGG, "--out", "x.yaml", "--dry-run", cwd=tmp_path))
    assert line.startswith("error: --out: only with --within"), line
    mine = tmp_path / "mine.yaml"
    mine.write_text("# my own notes\n")
    line = one_line(ablate("sweep", LOSS_AGG, "--profile", profile(tmp_path, 16), "--within",
                           "14d", "--out", mine, cwd=tmp_path))
    assert "exists and is not an earlier proposal" in line and mine.read_text() == "# my own notes\n"
