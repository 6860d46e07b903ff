"""A GPU recipe whose Slurm jobs would get no GPUs is refused in one line naming a profile that
fits, by `ablate sweep` and its dry run alike (exit 2, nothing written); `--force` overrides
(issue 40, ablate/studies/gpu_need.py)."""

from __future__ import annotations

from pathlib import Path

from _cli import ablate

from ablate.adapters.builtin.gpu_check import cpu_step_s
from trainer.config import TrainConfig

# loss_agg.yaml shrunk to a few samples of a few tokens (its prompts are still planned at the
# paper's 2,048 tokens: trainer/plan/memory.py PROMPT_TOKENS)
SMALL = ["rollout.prompts_per_step=2", "rollout.generations_per_prompt=2",
         "rollout.max_new_tokens=6", "length.thinking_budget=4", "length.answer_budget=2",
         "seeds=[0]"]


def _over(*pairs: str) -> list[str]:
    return [x for p in pairs for x in ("--override", p)]


def _one_line(r) -> str:
    assert r.returncode == 2 and not r.stdout and "Traceback" not in r.stderr, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r
    return lines[0]


def test_paper_study_on_a_cpu_profile_is_refused_by_dry_run_and_sweep(tmp_path):
    res = tmp_path / "res"
    dry = _one_line(ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm", "--dry-run"))
    real = _one_line(ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm",
                            "--results", str(res)))
    assert dry == real, (dry, real)  # one rule, one message
    assert "variant loss.aggregation=sample needs GPUs (Qwen/Qwen3-8B, 8.2B params" in dry
    assert "profile slurm: slurm.gpus_per_node 0" in dry, dry
    assert "use --profile slurm_gpu (2 nodes x 8 GPUs of 80 GiB: the plan fits)" in dry, dry
    assert "--force" in dry and not res.exists()
    forced = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm", "--dry-run",
                    "--force")
    assert forced.returncode == 0, forced
    assert "not checked against any GPU" in forced.stdout  # what the plan cannot check


def test_the_line_is_drawn_by_the_cpu_time_of_one_step():
    """The same shrunk recipe: an 8B model's one step takes hours of CPU (refused), a 0.5B
    model's minutes (planned on CPUs); engine.device cpu is the user's choice either way."""
    big = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm", "--dry-run",
                 *_over(*SMALL))
    assert "needs GPUs" in _one_line(big) and "longer than its 60-min job" in big.stderr
    small = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm", "--dry-run",
                   *_over(*SMALL, "model.name_or_path=Qwen/Qwen2.5-0.5B"))
    assert small.returncode == 0, small
    cpu = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm", "--dry-run",
                 *_over(*SMALL, "engine.device=cpu", "engine.type=torch",
                        "engine.zero_stage=0"))
    assert cpu.returncode == 0, cpu
    c = TrainConfig.model_validate({"model": {"name_or_path": "Qwen/Qwen3-8B"}})
    one, many = cpu_step_s(c, 1), cpu_step_s(c, 64)
    assert one == 64 * many and one > 3600, (one, many)  # over the job's cores
    assert cpu_step_s(TrainConfig.model_validate(
        {"model": {"name_or_path": "/nowhere/model"}}), 1) is None  # not judged


def test_the_named_profile_is_one_the_study_fits_next_to_it(tmp_path):
    """A study in the user's folder with sweeps/: a GPU profile too small for 8B is passed
    over; the first that fits is named by the bare name `--profile` takes."""
    study = tmp_path / "study.yaml"
    study.write_text(f"name: mine\nbase: {Path('recipes/scalerl.yaml').resolve()}\n"
                     "axes:\n  loss.aggregation: [sample, token]\n")
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    gpus = ("executor: slurm\ngpu_memory_gib: {mem}\nslurm:\n  nodes: 2\n  tasks_per_node: 4\n"
            "  gpus_per_node: 8\n  time_min: 240\n  signal_delay_s: 300\n")
    (sweeps / "a_small.yaml").write_text(gpus.format(mem=16))
    (sweeps / "b_big.yaml").write_text(gpus.format(mem=80))
    (sweeps / "cpu.yaml").write_text("executor: slurm\nslurm:\n  nodes: 1\n")
    line = _one_line(ablate("sweep", str(study), "--profile", str(sweeps / "cpu.yaml"),
                            "--dry-run"))
    assert "use --profile b_big (2 nodes x 8 GPUs of 80 GiB: the plan fits)" in line, line
    ok = ablate("sweep", str(study), "--profile", "b_big", "--dry-run")
    assert ok.returncode == 0, ok  # the name it gives works as given


def test_another_executor_or_a_gpu_profile_is_not_judged():
    local = ablate("sweep", "recipes/loss_agg.yaml", "--executor", "local", "--dry-run")
    assert local.returncode == 0, local  # GPUs not known here: the trainer checks at start
    gpu = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run")
    assert gpu.returncode == 0, gpu
