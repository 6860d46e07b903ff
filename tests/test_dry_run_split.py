"""`ablate sweep --dry-run` on the split the plan picks (rollout.vllm.generation_gpus auto,
trainer/plan/split_choice.py): the line that shows the choice, its step and its neighbours',
its `--json`, the Slurm tasks a run's jobs get under `tasks_per_node: auto`, and the exit code:
2 wherever `ablate sweep` would refuse (ablate/studies/sweep.py check_plans), after the plans.

Which split is chosen, worked by hand, is tests/test_topology.py's; here the CLI says it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import yaml
from _cli import ablate

from trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def paper(**vllm) -> TrainConfig:
    tree = yaml.safe_load((ROOT / "recipes" / "scalerl.yaml").read_text())
    tree["rollout"].setdefault("vllm", {}).update(vllm)
    return TrainConfig.model_validate(tree)


def profile(tmp_path: Path, **slurm) -> Path:
    """sweeps/slurm_gpu.yaml with some `slurm` keys changed, as a file."""
    tree = yaml.safe_load((ROOT / "sweeps" / "slurm_gpu.yaml").read_text())
    tree["slurm"].update(slurm)
    out = tmp_path / "gpu.yaml"
    out.write_text(yaml.safe_dump(tree))
    return out


def test_the_dry_run_shows_the_split_its_step_and_its_neighbours():
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run")
    assert r.returncode == 0, r
    text = " ".join(r.stdout.split())  # folded at the terminal's width: read as one text
    assert ("split per node: 6 generate, 2 train (rollout.vllm.generation_gpus auto: the "
            "shortest planned step whose memory fits): step 15 min; neighbours 5/3 step 19 min, "
            "7/1 training needs 89.35 GiB of 80") in text, text
    assert "a task per training GPU of each run's split (tasks_per_node auto)" in text
    assert "4 training ranks" in text and "6 vLLM engines of 1 GPU each on every node" in text
    runs = json.loads(ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu",
                             "--dry-run", "--json").stdout)
    split = runs[0]["resources"]["split"]
    assert (split["generation_gpus"], split["training_gpus"], split["ranks_per_node"]) == (6, 2, 2)
    per_node = [o for o in split["options"] if not o["generation_nodes"]]
    steps = {o["generation_gpus"]: o["step_s"] for o in per_node}
    assert min((s, -g) for g, s in steps.items() if g != 7) == (steps[6], -6)
    assert per_node[-1]["out"] and split["set"] is None
    # node roles weighed beside (1 generation + 1 training node), not chosen: slower here
    roles = [o for o in split["options"] if o["generation_nodes"]]
    assert [o["generation_nodes"] for o in roles] == [1] and split["generation_nodes"] is None
    assert "node roles: best 1 generation + 1 training nodes, step 1,389 s against 926 s" \
        in text and split["layout"] == "split per node: 6 generate, 2 train"
    assert runs[0]["resources"]["wall_h"] < 900  # issue 40: under 900 h a run


def test_a_set_split_or_pinned_tasks_say_what_auto_would_choose(tmp_path):
    half = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run",
                  "--override", "rollout.vllm.generation_gpus=4")
    text = " ".join(half.stdout.split())
    assert half.returncode == 0, half
    assert "split per node: 4 generate, 4 train (rollout.vllm.generation_gpus as set); auto " \
           "would choose 6/2, step 15 min against 23 min" in text, text
    pinned = ablate("sweep", "recipes/loss_agg.yaml", "--profile",
                    str(profile(tmp_path, tasks_per_node=4)), "--dry-run")
    text = " ".join(pinned.stdout.split())
    assert "among the splits that leave each of slurm.tasks_per_node 4 ranks a GPU): step " \
           "23 min; neighbours 3/5 step 31 min" in text, text
    assert "auto with slurm.tasks_per_node: auto would choose 6/2, step 15 min" in text


def test_slurm_jobs_get_the_tasks_their_split_asks_for(tmp_path):
    """`tasks_per_node: auto`: a run's jobs start one task per training GPU of its topology on
    the profile's shape (the split the dry run showed); a number in the profile is passed as
    it is. Built, not submitted (no sbatch needed)."""
    from ablate.studies.launch import slurm
    from ablate.studies.launch.profile import load_profile
    from ablate.studies.sweep import resources_of

    prof = load_profile(ROOT / "sweeps" / "slurm_gpu.yaml")
    shape, limits = prof.job_shape("slurm"), prof.limits("slurm")
    runs = {}
    for name, c in (("auto", paper()), ("half", paper(generation_gpus=4)),
                    ("ppo", paper(generation_gpus=4).model_copy(update={
                        "off_policy": paper().off_policy.model_copy(
                            update={"mode": "ppo_off_policy"})}))):
        runs[name] = resources_of(c, tmp_path / name, shape, limits)  # what the sweep submits
    assert {k: slurm.tasks_per_node(d, prof) for k, d in runs.items()} == \
        {"auto": 2, "half": 4, "ppo": 4}  # ppo_off_policy: the same split (issue 46)
    pinned = load_profile(profile(tmp_path, tasks_per_node=4))
    assert slurm.tasks_per_node(runs["auto"], pinned) == 4
    other = resources_of(paper(), tmp_path / "x", shape, limits)
    assert slurm.tasks_per_node(replace(other, ranks_per_node=None), prof) == \
        prof.slurm.gpus_per_node  # another trainer's run (no topology): one per GPU
    ex = slurm.executor(tmp_path / "submitit", prof.slurm, "ablate-test", 7, tasks=2)
    assert ex.parameters["ntasks_per_node"] == 2
    # The task hosting a node's engines gets cores for them (one per engine process and one
    # for its client, on top of the rank's), and srun is told so under every Slurm version.
    from trainer.plan.topology import topology

    engines = topology(paper(), prof.job_shape("slurm")).engines
    base = prof.slurm.cpus_per_task
    cpus = slurm.cpus_per_task(runs["auto"], prof)
    assert len(engines) == 6 and cpus == base + 2 * 6, (engines, cpus)
    ex = slurm.executor(tmp_path / "submitit", prof.slurm, "ablate-test", 7, tasks=2, cpus=cpus)
    assert ex.parameters["cpus_per_task"] == cpus
    assert ex.parameters["srun_args"][0] == f"--cpus-per-task={cpus}"
    assert ex.parameters["setup"][0] == f"export SRUN_CPUS_PER_TASK={cpus}"


def test_the_dry_run_exits_2_where_the_sweep_refuses(tmp_path):
    """One rule (check_plans): a plan that does not fit, or cannot reach its budget, is shown
    and then refused in the sweep's own line; --force shows it and exits 0."""
    few = profile(tmp_path, max_num_timeout=50)
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(few), "--dry-run")
    assert r.returncode == 2, r
    assert "CANNOT REACH THE BUDGET" in r.stdout  # the plan that says why, first
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "cannot reach its budget under this profile" in line
    assert "the profile allows 50 requeues" in line and "Traceback" not in line, line
    sweep = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(few),
                   "--results", str(tmp_path / "results"))
    assert sweep.returncode == 2 and sweep.stderr.strip() == line  # the same refusal
    assert not (tmp_path / "results").exists()
    small = tmp_path / "small.yaml"  # no split fits 16 GiB: the memory refusal
    small.write_text(few.read_text().replace("gpu_memory_gib: 80", "gpu_memory_gib: 16"))
    m = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(small), "--dry-run")
    assert m.returncode == 2 and "does not fit 16 GiB GPUs" in m.stderr, m
    assert "no split could be planned" in " ".join(m.stdout.split()), m.stdout
    forced = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(few), "--dry-run",
                    "--force")
    assert forced.returncode == 0 and "CANNOT REACH THE BUDGET" in forced.stdout, forced
