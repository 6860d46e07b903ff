"""Expansion: modes, seeds, collapsing, names, ids, chained bases, budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.studies.expand import expand, run_id_of
from ablate.errors import InputError
from ablate.studies.study import load_study

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "recipes" / "scalerl.yaml"


def study(tmp_path: Path, body: str) -> list:
    p = tmp_path / "s.yaml"
    p.write_text(f"name: s\nbase: {BASE}\n{body}")
    return expand(load_study(p))


def test_grid_times_seeds(tmp_path):
    vs = study(tmp_path, "axes:\n  loss.type: [ppo, cispo]\n  loss.aggregation: [sample, token]\nseeds: [0, 1, 2]\n")
    assert len(vs) == 2 * 2 * 3
    names = {v.name for v in vs}
    assert "loss.type=ppo,loss.aggregation=token" in names
    for v in vs:
        kv = dict(x.split("=") for x in v.name.split(","))
        assert v.config.loss.type == kv["loss.type"]
        assert v.config.loss.aggregation == kv["loss.aggregation"]
        assert v.config.seed == v.seed
    assert len({v.run_id for v in vs}) == len(vs)


def test_one_at_a_time_collapses_value_equal_to_base(tmp_path):
    # prompt is the ScaleRL default aggregation: that point is the base itself.
    vs = study(tmp_path, "mode: one_at_a_time\naxes:\n  loss.aggregation: [sample, prompt]\n"
                         "  advantage.normalization: [none]\nseeds: [0]\n")
    assert [v.name for v in vs] == ["base", "loss.aggregation=sample", "advantage.normalization=none"]
    base = vs[0].config
    assert vs[1].config.advantage.normalization == base.advantage.normalization
    assert vs[2].config.loss.aggregation == base.loss.aggregation


def test_zip_pairs_values(tmp_path):
    vs = study(tmp_path, "mode: zip\naxes:\n  rollout.prompts_per_step: [32, 64]\n"
                         "  rollout.generations_per_prompt: [24, 12]\n")
    assert [(v.config.rollout.prompts_per_step, v.config.rollout.generations_per_prompt) for v in vs] == [(32, 24), (64, 12)]


def test_leave_one_out_reverts_each_component_from_full_recipe():
    vs = expand(load_study(ROOT / "recipes" / "loo.yaml"))
    by = {(v.name, v.seed): v.config for v in vs}
    full = by[("base", 0)]
    assert full.loss.type == "cispo" and full.precision.trainer_lm_head_fp32
    fp32 = by[("revert=fp32_head", 0)]
    assert not fp32.precision.trainer_lm_head_fp32 and not fp32.precision.generator_lm_head_fp32
    assert fp32.loss == full.loss  # only that component changed
    assert by[("revert=loss_type", 1)].loss.type == "dapo"
    assert len({n for n, _ in by}) == 1 + 8


def test_ids_are_content_hashes(tmp_path):
    a = study(tmp_path, "axes:\n  loss.type: [ppo]\n")
    # the same config reached through overrides instead of an axis has the same id
    b = study(tmp_path, "overrides:\n  loss: {type: ppo}\n")
    assert a[0].run_id == b[0].run_id and len(a[0].run_id) == 12
    assert a[0].run_id == run_id_of(a[0].config.model_dump(mode="json"))
    c = study(tmp_path, "axes:\n  loss.type: [ppo]\nseeds: [1]\n")
    assert c[0].run_id != a[0].run_id


def test_adding_an_axis_value_keeps_existing_ids(tmp_path):
    before = study(tmp_path, "axes:\n  loss.type: [ppo, dapo]\n")
    after = study(tmp_path, "axes:\n  loss.type: [ppo, dapo, gspo]\n")
    assert {v.run_id for v in before} < {v.run_id for v in after}


def test_budget_and_chained_base(tmp_path):
    (tmp_path / "r1.yaml").write_text(f"base: {BASE}\nloss: {{type: ppo, eps_high: 0.3}}\n")
    (tmp_path / "r2.yaml").write_text("base: r1.yaml\noptim.lr: 1.0e-6\n")
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbase: r2.yaml\nbudget: {gpu_hours: 3.5}\naxes:\n  loss.type: [ppo]\n")
    (v,) = expand(load_study(p))
    assert v.config.loss.eps_high == 0.3 and v.config.optim.lr == 1e-6
    assert v.config.budget.gpu_hours == 3.5 and v.config.budget.steps is None


def test_variant_json_shape(tmp_path):
    (v,) = study(tmp_path, "axes:\n  loss.type: [ppo]\n")
    j = v.to_json()
    assert set(j) == {"run_id", "name", "seed", "config"}
    assert j["config"]["loss"]["type"] == "ppo"


@pytest.mark.parametrize("recipe", ["loss_type", "loss_agg", "adv_norm", "precision", "curriculum",
                                    "off_policy", "length", "scale", "loo", "quickstart"])
def test_shipped_study_axes_change_what_they_say(recipe):
    ls = load_study(ROOT / "recipes" / f"{recipe}.yaml")
    vs = expand(ls)
    for v in vs:
        if v.name in ("base",) or v.name.startswith("revert="):
            continue
        for part in v.name.split(","):
            path, val = part.split("=", 1)
            node = v.config
            for k in path.split("."):
                node = getattr(node, k)
            assert ("null" if node is None else str(node).lower()) == val.lower(), (v.name, node)


def test_run_id_ignores_placement_and_logging_but_not_what_is_computed(tmp_path):
    """A resumed run keeps its id when only vLLM's GPU fit, the micro-batch size, the checkpoint
    cadence or the trackers change (an OOM fix, a new dashboard); anything that changes what is computed gives a new run."""
    (base,) = study(tmp_path, "axes:\n  seed: [0]\n")
    moved = study(tmp_path, "overrides:\n  rollout.vllm.gpu_memory_utilization: 0.5\n"
                            "  rollout.vllm.enforce_eager: false\n"
                            "  logging.backends: [tensorboard]\n"
                            "  checkpoint.every_steps: 7\n"
                            "  engine.micro_batch_tokens: 4096\naxes:\n  seed: [0]\n")
    hotter = study(tmp_path, "overrides:\n  rollout.temperature: 0.9\naxes:\n  seed: [0]\n")
    assert moved[0].config.rollout.vllm.gpu_memory_utilization == 0.5
    assert moved[0].run_id == base.run_id
    assert hotter[0].run_id != base.run_id


def test_grid_base_need_only_be_valid_once_its_axes_apply(tmp_path):
    # cispo takes no eps_high; every run of this grid is ppo or dapo, which do.
    body = "overrides:\n  loss.eps_high: 0.3\naxes:\n  loss.type: [ppo, dapo]\nseeds: [0]\n"
    vs = study(tmp_path, body)
    assert [(v.config.loss.type, v.config.loss.eps_high) for v in vs] == [("ppo", 0.3), ("dapo", 0.3)]
    # In one_at_a_time the base trains as it is, so the same base is an error there ...
    with pytest.raises(InputError, match="eps_high"):
        study(tmp_path, "mode: one_at_a_time\n" + body)
    # ... and in a grid a combination that is invalid still is, at the line that set the option.
    with pytest.raises(InputError, match=r"s\.yaml:4: loss: .*does not take eps_high"):
        study(tmp_path, body.replace("[ppo, dapo]", "[ppo, cispo]"))
    # A bad value at a key is an error even where an axis would set that key in every run.
    with pytest.raises(InputError, match="aggregation"):
        study(tmp_path, "overrides:\n  loss.aggregation: median\naxes:\n  loss.aggregation: [token, sample]\n")


@pytest.mark.parametrize("recipe", sorted(p.name for p in (ROOT / "recipes").glob("*.yaml")
                                          if "axes:" in p.read_text() or "components:" in p.read_text()))
def test_variant_count_is_known_before_expanding(recipe):
    """The size check counts from axis lengths (never expanding): it must equal what `_points`
    yields, in every mode the shipped studies use."""
    from ablate.studies.expand import _points, design_points

    ls = load_study(ROOT / "recipes" / recipe)
    assert design_points(ls.study) == sum(1 for _ in _points(ls))


@pytest.mark.parametrize("mode,body,points", [
    ("grid", "axes:\n  loss.type: [ppo, cispo, dapo]\n  loss.aggregation: [sample, token]\n", 6),
    ("one_at_a_time", "axes:\n  loss.type: [ppo, dapo]\n  loss.aggregation: [sample]\n", 4),
    ("zip", "axes:\n  loss.type: [ppo, dapo]\n  loss.aggregation: [sample, token]\n", 2),
])
def test_variant_count_per_mode(tmp_path, mode, body, points):
    from ablate.studies.expand import _points, design_points

    p = tmp_path / "s.yaml"
    p.write_text(f"name: s\nbase: {BASE}\nmode: {mode}\n{body}seeds: [0, 1]\n")
    ls = load_study(p)
    assert design_points(ls.study) == points == sum(1 for _ in _points(ls))


def test_a_resubmitted_run_trains_the_current_config_a_running_one_keeps_its_own(tmp_path):
    """Same run id, a changed setting the id leaves out (the vLLM share, after an OOM): the run
    being resubmitted gets the new config.yaml; one not being submitted (it may be running)
    keeps the file it started with."""
    import yaml

    from ablate.study_record import StudyRecord
    from ablate.studydir import StudyStore

    (old,) = study(tmp_path, "overrides:\n  rollout.vllm.gpu_memory_utilization: 0.3\n"
                             "axes:\n  seed: [0]\n")
    (new,) = study(tmp_path, "overrides:\n  rollout.vllm.gpu_memory_utilization: 0.5\n"
                             "axes:\n  seed: [0]\n")
    assert old.run_id == new.run_id
    store = StudyStore(tmp_path / "res" / "s")
    cfg = store.run_dir(old.run_id) / "config.yaml"

    def share() -> float:
        return yaml.safe_load(cfg.read_text())["rollout"]["vllm"]["gpu_memory_utilization"]

    store.write_study("name: s\n", StudyRecord(name="s"), [old])
    store.write_study("name: s\n", StudyRecord(name="s"), [new])  # not submitted: may be running
    assert share() == 0.3
    undo = store.write_study("name: s\n", StudyRecord(name="s"), [new],
                             frozenset({new.run_id}))
    assert share() == 0.5
    undo()  # a refused submission puts the old file back
    assert share() == 0.3
