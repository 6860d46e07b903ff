"""Cross-field validation (trainer/validate.py): every shipped recipe and study passes on every
launch profile, and every combination the trainer refuses at start is refused before launch,
with one line naming the keys and a valid alternative (through the real `ablate` executable)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _study_util import ROOT

from trainer.config import TrainConfig
from trainer.validate import ConfigConflict, JobShape, problems, validate

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
# sweeps/ also holds `ablate tune` search spaces (tune_*.yaml): not launch profiles.
PROFILES = sorted(p for p in (ROOT / "sweeps").glob("*.yaml") if not p.name.startswith("tune_"))


def ablate(*args: str) -> subprocess.CompletedProcess:
    """The installed console script (what a user runs), else `python -m ablate`."""
    exe = shutil.which("ablate")
    cmd = [exe] if exe else [sys.executable, "-m", "ablate"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


def is_study(path: Path) -> bool:
    from ablate.yamlio import load_yaml

    data = load_yaml(path).data or {}
    return any(k in data for k in ("axes", "name", "seeds"))


def test_the_walk_covers_every_recipe_study_and_profile():
    names = {p.name for p in RECIPES}
    assert {"scalerl.yaml", "loss_agg.yaml", "proxy.yaml", "off_policy.yaml"} <= names
    assert {p.name for p in PROFILES} >= {"local.yaml", "slurm.yaml", "slurm_gpu.yaml"}


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_passes_on_every_profile(recipe, profile):
    """What `ablate sweep --dry-run` and `ablate sweep` check before submitting: the
    cross-field checks on the profile's job shape, and (GPU profiles) the memory plan."""
    from ablate.cli.run import load_train_config
    from ablate.studies.launch.profile import load_profile
    from ablate.studies.sweep import check_fit, check_inputs
    from trainer.plan.memory import plan

    from ablate.errors import InputError

    prof = load_profile(profile)
    shape = prof.job_shape()
    if is_study(recipe):
        # force: the cross-field checks alone (raises on a conflict) ...
        _, variants, _ = check_inputs(recipe, profile=str(profile), force=True)
        assert variants
        check_fit(recipe, variants, shape)
        # ... and without it, a real checkpoint on a Slurm profile without GPUs is refused
        # in one line naming the shipped GPU profile (issue 40), anything else passes.
        real = any(v.config.model.name_or_path for v in variants)
        if prof.executor == "slurm" and not prof.slurm.gpus_per_node and real:
            with pytest.raises(InputError, match=r"needs GPUs .* use --profile slurm_gpu"):
                check_inputs(recipe, profile=str(profile))
        else:
            check_inputs(recipe, profile=str(profile))
    else:
        cfg = load_train_config(recipe)
        assert problems(cfg, shape) == []
        assert plan(cfg, shape).fits is not False


# Each combination the trainer refuses at start: (config, job shape, keys the line names,
# the alternative it offers). Sources: engine_deepspeed.make_deepspeed_engine, chat.prompt_encoder,
# distributed.resolve_device, plan/topology.split.
REFUSED = [
    ({"engine": {"type": "deepspeed", "zero_stage": 3}, "off_policy": {"mode": "pipeline"},
      "rollout": {"backend": "hf"}}, JobShape(),
     ["engine.zero_stage=3", "off_policy.mode=pipeline", "rollout.backend=hf"],
     "needs rollout.backend: vllm"),
    ({"model": {"chat_template": True}}, JobShape(),
     ["model.chat_template=true", "model.name_or_path=null"], "model.chat_template: false"),
    ({"engine": {"device": "cuda"}}, JobShape(gpus_per_node=0),
     ["engine.device=cuda", "gpus_per_node: 0"], "engine.device: auto or cpu"),
    ({"off_policy": {"mode": "pipeline"}, "rollout": {"backend": "vllm",
                                                       "vllm": {"generation_gpus": 8}}},
     JobShape(gpus_per_node=8), ["rollout.vllm.generation_gpus=8", "8-GPU node"], "1..7"),
    ({"off_policy": {"mode": "pipeline"}, "rollout": {"backend": "vllm"}},
     JobShape(nodes=2, ranks_per_node=8, gpus_per_node=8),
     ["generation_gpus=auto", "8 ranks per node", "none of a node's 8 GPUs",
      "rollout.backend=vllm"], "tasks_per_node: auto"),
    ({"off_policy": {"mode": "pipeline"}, "rollout": {"backend": "vllm",
                                                       "vllm": {"generation_gpus": 4}}},
     JobShape(nodes=2, ranks_per_node=8, gpus_per_node=8),
     ["8 ranks per node", "4 training GPUs", "rollout.backend=vllm"], "tasks_per_node: 4"),
    ({"off_policy": {"mode": "ppo_off_policy"}, "rollout": {"backend": "hf"}},
     JobShape(ranks_per_node=4, gpus_per_node=2), ["4 ranks per node", "2 training GPUs"],
     "tasks_per_node: 2"),
    # ppo_off_policy splits the node as pipeline mode does (issue 46 point 1): its ranks too
    # leave the engines GPUs of their own
    ({"off_policy": {"mode": "ppo_off_policy"}, "rollout": {"backend": "vllm"}},
     JobShape(ranks_per_node=4, gpus_per_node=2), ["4 ranks per node", "none of a node's 2 GPUs"],
     "tasks_per_node: auto"),
    # an engine on a training rank's GPU: two NCCL ranks on one GPU at the first weight push
    # (trainer/plan/topology.py module doc), in either mode
    # (`auto` would give the engines a node of their own: node roles; null splits every node)
    ({"off_policy": {"mode": "ppo_off_policy"},
      "rollout": {"backend": "vllm", "vllm": {"generation_gpus": None}}},
     JobShape(nodes=2, ranks_per_node=1, gpus_per_node=1),
     ["rollout.backend=vllm on 1-GPU nodes", "two ranks on one GPU", "Duplicate GPU detected"],
     "valid: nodes of at least 2 GPUs"),
    ({"off_policy": {"mode": "pipeline"}, "rollout": {"backend": "vllm"}},
     JobShape(ranks_per_node=1, gpus_per_node=1),
     ["rollout.backend=vllm on 1-GPU nodes", "share local rank 0's GPU"], "rollout.backend: hf"),
    ({"rollout": {"backend": "vllm", "vllm": {"generation_gpus": 3, "tensor_parallel_size": 2}}},
     JobShape(ranks_per_node=5, gpus_per_node=8),
     ["rollout.vllm.tensor_parallel_size=2", "3 generation GPUs"], "valid: 1, 3"),
    # trainer/generation/feeders.py: in pipeline mode with vLLM every node generates a dealt
    # share of each step's groups: a node dealt none is refused (uneven shares are not).
    ({"off_policy": {"mode": "pipeline"}, "rollout": {"backend": "vllm", "prompts_per_step": 3}},
     JobShape(nodes=4, ranks_per_node=4, gpus_per_node=8),
     ["rollout.prompts_per_step=3 is fewer than the job's 4 nodes", "off_policy.mode=pipeline"],
     "valid: at least 4"),
    # ppo_off_policy deals a big generation, k steps' groups, over the nodes
    ({"off_policy": {"mode": "ppo_off_policy", "k": 2},
      "rollout": {"backend": "vllm", "prompts_per_step": 1}},
     JobShape(nodes=4, ranks_per_node=4, gpus_per_node=8),
     ["rollout.prompts_per_step=1 x off_policy.k=2 (2 prompt groups a generation) is fewer than "
      "the job's 4 nodes", "off_policy.mode=ppo_off_policy"], "valid: at least 4"),
    # node roles (trainer/plan/topology.py roles_topology): at least one training node, and
    # a feeding training rank each, driven from their engine host
    ({"rollout": {"backend": "vllm", "vllm": {"generation_nodes": 2}}},
     JobShape(nodes=2, ranks_per_node=8, gpus_per_node=8),
     ["rollout.vllm.generation_nodes=2 on 2 node(s)", "at least one training node"],
     "valid: 1..1"),
    ({"rollout": {"backend": "vllm", "vllm": {"generation_nodes": 1, "generation_gpus": 4}}},
     JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8),
     ["rollout.vllm.generation_nodes=1 with rollout.vllm.generation_gpus=4"], "set one of them"),
    ({"rollout": {"backend": "vllm", "vllm": {"generation_nodes": 9}}},
     JobShape(nodes=10, ranks_per_node=8, gpus_per_node=8),
     ["rollout.vllm.generation_nodes=9", "fed by one training rank", "hold 8"],
     "valid: at most 8 generation nodes"),
    ({"rollout": {"backend": "vllm", "vllm": {"generation_nodes": 8, "client": "trainer"}}},
     JobShape(nodes=10, ranks_per_node=8, gpus_per_node=8),
     ["rollout.vllm.generation_nodes=8 with rollout.vllm.client=trainer", "engine host"],
     "valid: rollout.vllm.client auto or process"),
]


@pytest.mark.parametrize("tree, shape, keys, fix", REFUSED, ids=lambda x: None)
def test_each_refused_combination_is_one_line_with_keys_and_a_fix(tree, shape, keys, fix):
    cfg = TrainConfig.model_validate(tree)
    found = problems(cfg, shape)
    assert len(found) == 1, found
    line = found[0]
    assert "\n" not in line and all(k in line for k in keys) and fix in line, line
    with pytest.raises(ConfigConflict, match="^" + re.escape(line)):
        validate(cfg, shape)


def test_neighbours_of_each_refused_combination_pass():
    """Each check binds only on its combination: change one key and the config is accepted."""
    ok = [
        {"engine": {"type": "deepspeed", "zero_stage": 2}, "off_policy": {"mode": "pipeline"}},
        {"engine": {"type": "deepspeed", "zero_stage": 3}, "off_policy": {"mode": "ppo_off_policy"}},
        {"engine": {"type": "deepspeed", "zero_stage": 3}, "rollout": {"backend": "vllm"}},
        {"model": {"chat_template": True, "name_or_path": "/models/some-instruct"}},
        {"rollout": {"backend": "vllm", "vllm": {"generation_gpus": 7}}},
        {"rollout": {"backend": "vllm", "vllm": {"generation_gpus": 4, "tensor_parallel_size": 2}}},
    ]
    for tree in ok:
        assert problems(TrainConfig.model_validate(tree), JobShape(gpus_per_node=8)) == [], tree
    pipeline = TrainConfig.model_validate({"rollout": {"backend": "vllm"}})
    assert problems(pipeline, JobShape(ranks_per_node=4, gpus_per_node=8)) == []
    # prompts_per_step over the nodes: dealt unevenly where they do not divide (the paper's
    # 48 over 10 nodes), one node, a multiple, or one engine set (ppo_off_policy)
    odd = {"rollout": {"backend": "vllm", "prompts_per_step": 50}}
    paper = {"rollout": {**odd["rollout"], "prompts_per_step": 48}}
    for tree, nodes in ((odd, 1), (odd, 4), (paper, 10),
                        ({"rollout": {**odd["rollout"], "prompts_per_step": 3}}, 3),
                        ({**odd, "off_policy": {"mode": "ppo_off_policy"}}, 4),
                        ({"rollout": {**odd["rollout"], "prompts_per_step": 3},
                          "off_policy": {"mode": "ppo_off_policy", "k": 2}}, 4)):
        assert problems(TrainConfig.model_validate(tree),
                        JobShape(nodes=nodes, ranks_per_node=4, gpus_per_node=8)) == [], tree
    # vLLM beside a training rank on one GPU: fine on the CPU (gloo), and hf never has engines
    one = JobShape(nodes=2, ranks_per_node=1, gpus_per_node=1)
    for tree in ({"rollout": {"backend": "vllm"}, "engine": {"device": "cpu"}},
                 {"rollout": {"backend": "hf"}, "off_policy": {"mode": "ppo_off_policy"}}):
        assert problems(TrainConfig.model_validate(tree), one) == [], tree
    assert problems(TrainConfig.model_validate({"rollout": {"backend": "vllm"}}),
                    JobShape(nodes=2, ranks_per_node=2, gpus_per_node=0)) == []
    assert problems(pipeline.model_copy(update={"rollout": pipeline.rollout.model_copy(
        update={"backend": "hf"})}), JobShape(ranks_per_node=8, gpus_per_node=8)) == []
    # Unknown GPU count (local executor): the GPU checks wait for the trainer's own start.
    assert problems(TrainConfig.model_validate({"engine": {"device": "cuda"}}), JobShape()) == []


def test_trainer_refuses_at_start_before_writing_anything(tmp_path):
    import trainer

    cfg = TrainConfig.model_validate({"model": {"chat_template": True}})
    with pytest.raises(ConfigConflict, match="model.chat_template=true"):
        trainer.run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sweep_dry_run_refuses_the_old_paper_default_exit_2(tmp_path):
    """recipes/scalerl.yaml used to ship hf + pipeline + ZeRO-3: the dry run now says no."""
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run",
               "--override", "rollout.backend=hf")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    line = r.stderr.strip()
    assert "recipes/loss_agg.yaml" in line and "variant loss.aggregation=sample" in line
    assert "engine.zero_stage=3" in line and "rollout.backend: vllm" in line


@pytest.mark.slow
def test_sweep_refuses_before_writing_and_run_refuses_before_writing(tmp_path):
    results = tmp_path / "results"
    r = ablate("sweep", "recipes/quickstart.yaml", "--executor", "local", "--results",
               str(results), "--override", "model.chat_template=true")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "model.chat_template=true" in r.stderr and not results.exists()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"base: {ROOT / 'recipes' / 'proxy.yaml'}\nmodel: {{chat_template: true}}\n")
    out = tmp_path / "run"
    r = ablate("run", str(cfg), "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(cfg) in r.stderr and "model.chat_template: false" in r.stderr
    assert not out.exists()
