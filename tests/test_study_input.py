"""Bad study input: exit 2, one line naming file/line/key and what is valid, nothing written."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest

from ablate.cli import main
from ablate.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "recipes" / "scalerl.yaml"


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ablate", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


GOOD = f"name: s\nbase: {BASE}\naxes:\n  loss.aggregation: [sample, token]\nseeds: [0, 1]\n"

# 5 axes x 20 values: 3.2M runs, which used to hang `sweep --dry-run` while expanding.
HUGE_AXES = ("optim.lr", "rollout.temperature", "loss.eps_max", "optim.weight_decay",
             "optim.grad_clip")
HUGE = "name: s\naxes:\n" + "".join(
    f"  {a}: [{', '.join(str(round(0.01 * (i + 1) + k, 3)) for i in range(20))}]\n"
    for k, a in enumerate(HUGE_AXES)) + "base: proxy.yaml\n"  # last: the lines above stay put

CASES = {
    # id: (study text, expected fragments of the one-line message)
    "syntax": ("name: s\naxes: [unclosed\n", ["s.yaml:3", "YAML syntax error"]),
    "tab": ("name: s\naxes:\n\tloss.type: [ppo]\n", ["s.yaml:3", "tab"]),
    "duplicate": ("name: s\nseeds: [0]\nseeds: [1]\n", ["s.yaml:3", "duplicate key 'seeds'", "line 2"]),
    "unknown_key": (GOOD + "sedes: [3]\n", ["s.yaml:6", "unknown key 'sedes'", "did you mean 'seeds'"]),
    "unknown_axis": (f"name: s\nbase: {BASE}\naxes:\n  loss.agregation: [token]\n",
                     ["s.yaml:4", "loss.agregation", "did you mean 'loss.aggregation'"]),
    "unknown_override": ("name: s\noverrides:\n  optim:\n    lrr: 0.1\n",
                         ["s.yaml:4", "optim.lrr", "did you mean 'optim.lr'"]),
    "invalid_value": ("name: s\naxes:\n  loss.aggregation: [sample, tokn]\nbase: proxy.yaml\n",
                      ["s.yaml:3", "loss.aggregation", "'sample', 'prompt' or 'token'", "tokn"]),
    "invalid_override": ("name: s\noverrides:\n  rollout.temperature: -1\n",
                         ["s.yaml:3", "rollout.temperature", "greater than 0"]),
    "empty_axis": ("name: s\naxes:\n  loss.type: []\n", ["s.yaml:3", "no values"]),
    "empty_axes": ("name: s\naxes: {}\n", ["s.yaml:2", "axes is empty"]),
    "wrong_type": ("name: s\nseeds: zero\n", ["s.yaml:2", "seeds", "list"]),
    "wrong_type_axis": ("name: s\naxes:\n  loss.type: ppo\n", ["s.yaml:3", "axes.loss.type", "list"]),
    "missing_base": ("name: s\nbase: nope.yaml\n", ["s.yaml:2", "nope.yaml", "not found"]),
    "escape_name": ("name: ../evil\n", ["s.yaml:1", "name", "plain folder name"]),
    "python_tag": ("name: s\nseeds: !!python/object/apply:os.system [echo hi]\n",
                   ["s.yaml:2", "python/object/apply", "not allowed"]),
    "zip_lengths": ("name: s\nmode: zip\naxes:\n  loss.type: [ppo, dapo]\n  loss.aggregation: [token]\n",
                    ["mode zip", "equal length"]),
    "loo_without_components": ("name: s\nmode: leave_one_out\n", ["leave_one_out", "components"]),
    "no_base": ("name: s\n", ["s.yaml:1", "no `base:`", "proxy.yaml", "scalerl.yaml"]),
    "bad_mode": ("name: s\nmode: random\n", ["s.yaml:2", "mode", "grid"]),
    "missing_name": ("seeds: [0]\n", ["name", "missing"]),
    "dup_seeds": ("name: s\nseeds: [0, 0]\n", ["s.yaml:2", "listed twice"]),
    "dup_axis_value": ("name: s\naxes:\n  loss.aggregation: [token,\n    prompt, token]\n",
                       ["s.yaml:4", "axis 'loss.aggregation'", '"token" twice', "items 1 and 3"]),
    "dup_axis_number": ("name: s\naxes:\n  optim.lr: [0.001, 1.0e-3]\n",
                        ["s.yaml:3", "axis 'optim.lr'", "twice"]),
    "empty_file": ("# nothing yet\n", ["s.yaml", "empty", "name"]),
    "recipe_not_study": ("seed: 0\nloss: {type: ppo}\n",
                         ["TrainConfig recipe", "not a study", "ablate run", "--out",
                          "base: s.yaml"]),
    "too_many_runs": (HUGE, ["s.yaml:2", "3,200,000 runs", "max_variants 10,000",
                             "optim.lr (20) x rollout.temperature (20)", "max_variants:"]),
    # fit columns the trainer never logs: refused before anything trains (studies/fitcheck.py)
    "fit_y_typo": (GOOD + "fit: {x: flops, y: eval/pass_rat}\n",
                   ["s.yaml:6", "fit.y 'eval/pass_rat'", "(did you mean 'eval/pass_rate'?)"]),
    "fit_x_unknown": (GOOD + "fit:\n  x: wallclock\n",
                      ["s.yaml:7", "fit.x 'wallclock' is not a compute column",
                       "gpu_hours, flops, samples, tokens, step"]),
    "fit_compute_without_step_cost": (
        "name: s\ntrainer:\n  kind: command\n  command: echo {overrides}\n  keys: [lr]\n"
        "axes:\n  lr: [1, 2]\nfit: {x: compute, y: score}\n",
        ["s.yaml:8", "fit.x 'compute' is step x trainer.step_cost", "no trainer.step_cost"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_study_exits_2_with_one_line(case, tmp_path, monkeypatch, capsys):
    text, fragments = CASES[case]
    study = tmp_path / "s.yaml"
    study.write_text(text)
    results = tmp_path / "results"
    code, out, err = run_main(monkeypatch, capsys, "sweep", str(study), "--results", str(results),
                              "--executor", "local")
    assert code == 2, (out, err)
    assert not results.exists()  # refused before anything is written
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert "Traceback" not in err and out == ""
    assert not results.exists()


def test_circular_base(tmp_path, monkeypatch, capsys):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nloss: {type: ppo}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    (tmp_path / "s.yaml").write_text("name: s\nbase: a.yaml\n")
    code, _, err = run_main(monkeypatch, capsys, "sweep", str(tmp_path / "s.yaml"), "--dry-run")
    assert code == 2 and "circular base" in err and "a.yaml" in err and "b.yaml" in err


def test_error_in_chained_base_points_at_recipe_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "r.yaml").write_text("loss:\n  type: ppo\n  eps_max: -2\n")
    (tmp_path / "s.yaml").write_text("name: s\nbase: r.yaml\n")
    code, _, err = run_main(monkeypatch, capsys, "sweep", str(tmp_path / "s.yaml"), "--dry-run")
    assert code == 2 and "r.yaml:3" in err and "loss.eps_max" in err


def test_missing_profile_and_unknown_executor(tmp_path, monkeypatch, capsys):
    study = tmp_path / "s.yaml"
    study.write_text(GOOD)
    results = tmp_path / "results"
    code, _, err = run_main(monkeypatch, capsys, "sweep", str(study), "--results", str(results),
                            "--profile", "nosuchprofile")
    assert code == 2 and "profile 'nosuchprofile' not found" in err
    code, _, err = run_main(monkeypatch, capsys, "sweep", str(study), "--results", str(results),
                            "--executor", "kubernetes")
    assert code == 2 and "unknown executor 'kubernetes'" in err and "local, slurm, debug" in err
    bad = tmp_path / "p.yaml"
    bad.write_text("executor: local\nlocal:\n  max_paralel: 2\n")
    code, _, err = run_main(monkeypatch, capsys, "sweep", str(study), "--results", str(results),
                            "--profile", str(bad))
    assert code == 2 and "p.yaml:3" in err and "did you mean 'max_parallel'" in err
    assert not results.exists()


def test_schema_lists_axis_paths(monkeypatch, capsys):
    import json

    code, out, _ = run_main(monkeypatch, capsys, "schema")
    schema = json.loads(out)
    assert code == 0
    assert "loss.aggregation" in schema["properties"]["axes"]["propertyNames"]["enum"]
    assert schema["additionalProperties"] is False


def test_shipped_recipes_and_profiles_validate():
    from ablate.studies.expand import expand
    from ablate.studies.launch.profile import load_profile
    from ablate.studies.study import load_study

    for study in sorted((ROOT / "recipes").glob("*.yaml")):
        if study.name in ("scalerl.yaml", "proxy.yaml"):
            continue
        variants = expand(load_study(study))
        assert len(variants) >= 2, study
    for prof in sorted((ROOT / "sweeps").glob("*.yaml")):
        if "search" in prof.name or "tune" in prof.name:
            continue
        load_profile(prof)


def test_status_of_a_folder_that_is_not_a_study(tmp_path, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "status", str(tmp_path))
    assert code == 2 and out == "" and "not a study directory" in err and "ablate sweep" in err


def test_status_of_a_malformed_variants_json_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    # A variants.json that is not a list of runs is a one-line error, not a TypeError traceback.
    (tmp_path / "variants.json").write_text('{"a": 1}')
    code, out, err = run_main(monkeypatch, capsys, "status", str(tmp_path))
    assert code == 2 and out == "" and "variants.json: expected a JSON list of runs" in err
    (tmp_path / "variants.json").write_text('[{"run_id": "r1"}]')
    code, out, err = run_main(monkeypatch, capsys, "status", str(tmp_path))
    assert code == 2 and out == "" and 'entry 0 lacks "run_id"/"name"' in err


def test_dry_run_json_is_the_expansion_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import json

    study = tmp_path / "s.yaml"
    study.write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(monkeypatch, capsys, "sweep", str(study), "--dry-run", "--json",
                            "--executor", "local")  # not Slurm's GPU-less defaults (gpu_need.py)
    runs = json.loads(out)
    assert code == 0 and len(runs) == 4
    assert {r["name"] for r in runs} == {"loss.aggregation=sample", "loss.aggregation=token"}
    assert all(r["config"]["seed"] == r["seed"] for r in runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_ablate_run_config_may_chain_a_base_recipe_and_errors_name_the_line(tmp_path):
    # `ablate run` takes a config with `base:` (a recipe that chains a base is what study files
    # build on; it is not mistaken for a study), and its errors name the line.
    from ablate.cli.run import load_train_config
    from ablate.errors import InputError

    proxy = load_train_config(ROOT / "recipes" / "proxy.yaml")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"base: {ROOT / 'recipes' / 'proxy.yaml'}\nbudget:\n  steps: 3\n")
    got = load_train_config(cfg)
    assert got.budget.steps == 3 and got.model.proxy == proxy.model.proxy
    cfg.write_text("loss:\n  type: cispo\n  agregation: token\n")
    with pytest.raises(InputError, match=r"c.yaml:3: .*'loss.agregation'.*'loss.aggregation'"):
        load_train_config(cfg)
    cfg.write_text("name: s\naxes: {loss.type: [ppo]}\n")
    with pytest.raises(InputError, match="this is a study"):
        load_train_config(cfg)


def test_a_huge_grid_is_refused_before_expanding(tmp_path):
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    study = tmp_path / "s.yaml"
    study.write_text(HUGE)
    loaded = load_study(study)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="3,200,000 runs"):
            expand(loaded)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Counted, not built: expanding the grid allocated GBs (and took > 30 s); memory, unlike
    # time, does not depend on how busy the machine is.
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MiB allocated before the refusal"


def test_max_variants_raises_the_limit(tmp_path):
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    body = "name: s\nbase: proxy.yaml\naxes:\n  loss.aggregation: [sample, token]\nseeds: [0, 1]\n"
    study = tmp_path / "s.yaml"
    study.write_text(body + "max_variants: 3\n")
    with pytest.raises(InputError, match=r"4 runs .*above max_variants 3"):
        expand(load_study(study))
    study.write_text(body + "max_variants: 4\n")
    assert len(expand(load_study(study))) == 4
