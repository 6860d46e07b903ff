"""The time plan (trainer/plan/time_plan.py, time_model.py, time_jobs.py): its formulas against
hand counts, requeues derived from the profile's limits (not a constant), and what `ablate sweep` does with it: the dry run says
where jobs go and how long they take, and a study that cannot reach its budget under the
profile is refused in one line (`--force` overrides). The plan's CPU constants against real
proxy step times: benchmarks/bench_time_plan.py (not a timed test)."""

from __future__ import annotations

import inspect
import json
import math
import sys
from pathlib import Path

import pytest
from test_validate_all import ablate

from trainer.config import TrainConfig
from trainer.plan.model_shape import KNOWN, ModelShape
from trainer.plan.time_jobs import Limits, auto_max_num_timeout
from trainer.plan.time_model import (DECODE_BW_EFFICIENCY, GPUS, JOB_START_S_GPU, TRAIN_MFU,
                                     attention_flops_per_token, decode_rate, train_flops,
                                     trained_tokens)
from trainer.plan.time_plan import plan_time
from trainer.validate import JobShape

ROOT = Path(__file__).resolve().parents[1]
QWEN3_8B = ModelShape(**KNOWN["Qwen/Qwen3-8B"], source="test")
PAPER_SHAPE = JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80)
PAPER_LIMITS = Limits(time_min=240, max_requeues=50, signal_delay_s=300, gpu_model="h100")


def paper(**tree) -> TrainConfig:
    """recipes/scalerl.yaml (the paper recipe) with `tree` merged on top (nested keys too)."""
    import yaml
    from _trainer_util import merge

    base = yaml.safe_load((ROOT / "recipes" / "scalerl.yaml").read_text())
    return TrainConfig.model_validate(merge(base, tree))


def test_training_flops_are_8n_per_token_under_checkpointing_plus_attention():
    c = paper()
    tokens, ctx = 1000.0, 512.0
    # Kaplan et al.: 2N forward + 4N backward; checkpointing recomputes one forward (2N more).
    attn = 4 * 36 * ctx * 32 * 128  # 2 matmuls x 2 FLOPs x ctx x heads x head_dim, per layer
    assert attention_flops_per_token(QWEN3_8B, ctx) == attn
    n = QWEN3_8B.params
    assert train_flops(c, QWEN3_8B, tokens, ctx) == pytest.approx(tokens * (8 * n + 4 * attn))
    plain = paper(model={"gradient_checkpointing": False})
    assert train_flops(plain, QWEN3_8B, tokens, ctx) == pytest.approx(tokens * (6 * n + 3 * attn))


def test_decode_is_memory_bound_one_sequence_reads_the_weights_each_token():
    """One sequence, tiny context: each token reads every weight once (bf16), at the assumed
    share of the H100's 3.35 TB/s."""
    c = paper()
    h100 = GPUS["h100"]
    rate = decode_rate(QWEN3_8B, c, h100, tp=1, concurrent=1, ctx=1, bw_eff=DECODE_BW_EFFICIENCY)
    kv = 2 * 36 * 8 * 128 * 2  # K and V, layers, kv heads, head_dim, bf16
    assert rate == pytest.approx(3.35e12 * DECODE_BW_EFFICIENCY / (2 * QWEN3_8B.params + kv))
    # More sequences share the weight read: throughput grows, until the KV reads dominate.
    r64 = decode_rate(QWEN3_8B, c, h100, tp=1, concurrent=64, ctx=1, bw_eff=DECODE_BW_EFFICIENCY)
    assert 50 * rate < r64 < 64 * rate


def test_paper_recipe_plan_is_generation_bound_and_its_eval_outlasts_a_job():
    """Issue 31: the paper's eval outlasts a 4 h job, but it keeps its finished chunks at each
    requeue, so it ends over a few jobs (issue 46: on every node's engines, rollouts paused
    and training waiting, trainer/loop/final_eval.py); what stops the run under
    `max_num_timeout: 50` is the requeues, and under `auto` nothing."""
    t = plan_time(paper(), PAPER_SHAPE, PAPER_LIMITS)
    assert t.steps == 2000 and t.devices == 16 and t.evals == 21  # step 0, every 100, the last
    assert t.generation_s > t.train_s and t.step_s == t.generation_s  # pipeline: the slower
    # Training: 768 samples x (2,048 + completion) tokens at 8N + attention over 8 ranks.
    from trainer.plan.time_model import lengths

    prompt, completion = lengths(paper())
    flops = train_flops(paper(), QWEN3_8B, 768 * (prompt + completion), (prompt + completion) / 2)
    assert t.train_s == pytest.approx(flops / (8 * 989e12 * TRAIN_MFU))
    assert t.eval_s > 4 * 3600 and t.eval_blocks_training and t.eval_resumable
    assert t.eval_cost_s == t.eval_s  # the training waits for it
    usable = 4 * 3600 - JOB_START_S_GPU - 300
    assert t.eval_jobs == math.ceil(t.eval_s / usable) and t.eval_s < t.eval_interval_s
    assert any(f"ends over {t.eval_jobs} jobs" in w for w in t.warnings), t.warnings
    assert t.reaches_budget is False and "no eval ever finishes" not in t.problem
    assert f"raise slurm.max_num_timeout to {t.requeues}" in t.problem
    assert t.gpu_hours == pytest.approx(t.wall_h * 16)
    assert t.wall_h > 200  # more than 50 requeues x 4 h could give, whatever else is fixed
    auto = plan_time(paper(), PAPER_SHAPE, Limits(time_min=240, signal_delay_s=300,
                                                  gpu_model="h100", auto_requeues=True))
    assert auto.reaches_budget is True and auto.problem == ""
    assert auto.requeues == t.requeues and auto.max_num_timeout == auto_max_num_timeout(
        t.requeues) > t.requeues


def test_every_nodes_engines_generate_in_pipeline_mode_and_every_eval_on_all_of_them():
    """Pipeline mode with vLLM: each node's local rank 0 starts its node's engines and
    generates its share of a step's groups, so a second node doubles the rollouts' decode
    rate (the rule when only rank 0's node ran engines kept it equal). On one node the eval
    pins 2 of its 4 engines beside the rollouts; on two, every eval decodes on all 8 engines,
    rollouts paused and training waiting (trainer/loop/final_eval.py; issue 46): a quarter
    of the time, all of it charged to the wall."""
    from dataclasses import replace

    c = paper(eval={"num_prompts": 50})
    one, two = (plan_time(c, replace(PAPER_SHAPE, nodes=n), PAPER_LIMITS) for n in (1, 2))
    # 4 one-GPU engines a node, each decoding as many sequences at once either way (the KV
    # room binds): twice the engines, twice the tokens/s.
    assert two.generation_tokens_per_s == pytest.approx(2 * one.generation_tokens_per_s, rel=1e-3)
    assert two.generation_s == pytest.approx(one.generation_s / 2, rel=1e-3)
    assert two.eval_s == pytest.approx(one.eval_s / 4, rel=1e-3)  # 8 engines, not 2
    assert two.eval_blocks_training and two.eval_cost_s == two.eval_s
    assert not one.eval_blocks_training and one.eval_cost_s < one.eval_s
    assert any("4 engines of 1 GPU on each of 2 nodes" in a for a in two.assumptions)
    assert any("eval on all 8 engines of the 2 nodes" in a for a in two.assumptions)


def test_ppo_off_policy_generates_on_every_nodes_engines_then_trains():
    """ppo_off_policy with vLLM (issue 46 point 1): pipeline mode's per-node split run
    synchronously. Every node's engines generate their share of the big generation (k steps'
    prompts), so a second node doubles the decode rate (before: one engine on rank 0's GPU, a
    second node added none); then the training GPUs train: the plan charges a step
    generation + training, where pipeline mode on the same split charges the slower."""
    from dataclasses import replace

    split = {"vllm": {"generation_gpus": 4}}
    ppo = paper(off_policy={"mode": "ppo_off_policy", "k": 8}, rollout=split,
                eval={"num_prompts": 50})
    p1, p2 = (plan_time(ppo, replace(PAPER_SHAPE, nodes=n), PAPER_LIMITS) for n in (1, 2))
    assert p2.generation_tokens_per_s == pytest.approx(2 * p1.generation_tokens_per_s, rel=1e-3)
    pipe = plan_time(paper(rollout=split, eval={"num_prompts": 50}), PAPER_SHAPE, PAPER_LIMITS)
    for p in (p1, p2):
        assert p.step_s == pytest.approx(p.generation_s + p.train_s)  # in series, not overlapped
        assert p.overlap == "ppo_off_policy: generation, then training"
    # the same engines and ranks as pipeline mode on that split: the same parts
    assert p2.train_s == pytest.approx(pipe.train_s)
    assert p2.step_s > pipe.step_s == pytest.approx(max(pipe.generation_s, pipe.train_s))
    # its evals over both nodes' 8 engines too, training waiting (no rollout in flight)
    assert p2.eval_blocks_training and any("eval on all 8 engines of the 2 nodes" in a
                                           for a in p2.assumptions)


def test_a_big_generation_longer_than_a_job_is_refused():
    """ppo_off_policy's big generation (k steps' prompts at once) is abandoned by a stop
    inside it: one that outlasts a job never ends, and the plan says so in one line."""
    from dataclasses import replace

    ppo = paper(off_policy={"mode": "ppo_off_policy", "k": 8})
    shape = replace(PAPER_SHAPE, ranks_auto=True)
    ok = plan_time(ppo, shape, Limits(time_min=240, signal_delay_s=300, gpu_model="h100",
                                      auto_requeues=True))
    assert ok.reaches_budget and 8 * ok.generation_s < 240 * 60  # ~2.5 h of a 4 h job
    short = plan_time(ppo, shape, Limits(time_min=120, signal_delay_s=300, gpu_model="h100",
                                         auto_requeues=True))
    assert short.reaches_budget is False, short.problem
    assert short.problem.startswith("one big generation (off_policy.k=8 steps' prompts) takes")
    assert "lower off_policy.k or raise slurm.time_min" in short.problem
    assert "\n" not in short.problem


def test_off_policy_study_plans_ppo_within_twice_the_pipeline_gpu_hours():
    """recipes/off_policy.yaml on sweeps/slurm_gpu.yaml's shape (2 x 8 H100 80 GiB, one task
    per training GPU of each variant's `auto` split): ppo_off_policy reaches its budget within
    2x the pipeline variant's GPU-hours (before issue 46: ~366,000 GPU-hours, refused)."""
    import yaml
    from dataclasses import replace

    axes = yaml.safe_load((ROOT / "recipes" / "off_policy.yaml").read_text())["axes"]
    assert list(axes) == ["off_policy.mode"]  # no memory share of a GPU shared with training
    shape = replace(PAPER_SHAPE, ranks_auto=True)
    limits = Limits(time_min=240, signal_delay_s=300, gpu_model="h100", auto_requeues=True)
    pipe, ppo = (plan_time(paper(off_policy={"mode": m}), shape, limits)
                 for m in ("pipeline", "ppo_off_policy"))
    assert pipe.reaches_budget and ppo.reaches_budget, (pipe.problem, ppo.problem)
    assert pipe.gpu_hours < ppo.gpu_hours <= 2 * pipe.gpu_hours, (pipe.gpu_hours, ppo.gpu_hours)


def test_an_eval_longer_than_the_gap_between_evals_is_refused():
    """Evals beside training (one node: pinned engines) that take longer than the steps
    between two evals pile up: refused, with what to change (one line)."""
    from dataclasses import replace

    t = plan_time(paper(eval={"every_steps": 10}), replace(PAPER_SHAPE, nodes=1),
                  Limits(time_min=240, signal_delay_s=300, gpu_model="h100", auto_requeues=True))
    assert t.eval_s > t.eval_interval_s and t.reaches_budget is False
    assert "evals pile up" in t.problem and "raise eval.every_steps" in t.problem
    assert "\n" not in t.problem


def test_requeues_are_derived_from_the_time_limit_not_a_constant():
    """A smaller eval that fits a job: the jobs needed follow from the time limit, and a
    shorter limit needs more of them; past max_num_timeout the plan says it cannot reach."""
    c = paper(eval={"num_prompts": 50}, checkpoint={"every_minutes": 30})
    four = plan_time(c, PAPER_SHAPE, PAPER_LIMITS)
    eight = plan_time(c, PAPER_SHAPE, Limits(time_min=480, max_requeues=50, signal_delay_s=300))
    for t in (four, eight):
        assert t.jobs == math.ceil(t.steps / t.steps_per_job) and t.requeues == t.jobs - 1
    assert four.jobs > 1.9 * eight.jobs
    assert four.requeues > 50 and four.reaches_budget is False
    assert f"raise slurm.max_num_timeout to {four.requeues}" in four.problem
    roomy = plan_time(c, PAPER_SHAPE, Limits(time_min=240, max_requeues=four.requeues,
                                             signal_delay_s=300))
    assert roomy.reaches_budget is True and roomy.problem == ""


# The lockstep case (hf generation under ZeRO-3: every rank decodes, eval on every rank, a stop
# only between generate calls): the one configuration where eval blocks the steps and a stop
# saves at the next step boundary (trainer/plan/time_model.py _lockstep).
LOCKSTEP = {"rollout": {"backend": "hf"}, "off_policy": {"mode": "ppo_off_policy", "k": 1}}


def test_a_job_that_cannot_checkpoint_keeps_no_step():
    """Lockstep: the stop signal saves at the next step boundary only if a step and a
    checkpoint fit in signal_delay_s; otherwise only scheduled checkpoints survive a requeue,
    and with checkpoint.every_steps 50 a 4-hour job (a handful of long steps) keeps none."""
    # hf decodes slowly (a few prompts' eval already takes most of an hour): a tiny eval, so
    # what ends the job is the signal window, not the eval.
    lockstep = paper(eval={"num_prompts": 2}, **LOCKSTEP)
    t = plan_time(lockstep, PAPER_SHAPE, PAPER_LIMITS)
    assert any("signal_delay_s 300 is less than a step plus a checkpoint" in w for w in t.warnings)
    assert t.reaches_budget is False and t.steps_per_job == 0 and "keeps no step" in t.problem
    assert t.eval_blocks_training
    ok = plan_time(lockstep, PAPER_SHAPE,
                   Limits(time_min=24 * 60, max_requeues=10_000,
                          signal_delay_s=math.ceil(t.step_s + t.checkpoint_s) + 60))
    assert ok.steps_per_job > 0 and not any("signal_delay_s" in w for w in ok.warnings)


def test_budget_in_flops_and_gpu_hours_gives_steps():
    c = paper(budget={"steps": None, "gpu_hours": 1600.0})
    t = plan_time(c, PAPER_SHAPE, Limits())
    assert t.steps == math.ceil(1600 * 3600 / (t.step_s * 16))  # train-loop wall x 16 GPUs
    proxy = TrainConfig.model_validate({"budget": {"flops": 1e12}})
    tp = plan_time(proxy, JobShape(), Limits())
    from trainer.plan.model_shape import proxy_shape
    from trainer.plan.time_model import lengths

    n = proxy_shape(proxy).params
    prompt, completion = lengths(proxy)
    samples = proxy.rollout.prompts_per_step * proxy.rollout.generations_per_prompt
    # as the trainer counts them: generation's 2N a token includes the prompt's
    # (trainer/generation/stream.py gen_tokens), training's 6N a processed token
    per_step = 2 * n * samples * (prompt + completion) + 6 * n * trained_tokens(proxy)
    assert tp.steps == math.ceil(1e12 / per_step) and tp.device.startswith("CPU")


def test_local_requeue_limit_is_submitits_default():
    import submitit

    from ablate.studies.launch.local import LOCAL_MAX_NUM_TIMEOUT

    default = inspect.signature(submitit.LocalExecutor.__init__).parameters["max_num_timeout"]
    assert LOCAL_MAX_NUM_TIMEOUT == default.default


@pytest.mark.slow
def test_sweep_refuses_a_study_that_cannot_reach_its_budget_and_force_overrides(tmp_path):
    """A CPU proxy study under a local profile whose jobs are too short to keep a step."""
    prof = tmp_path / "short.yaml"
    prof.write_text("executor: local\nlocal: {timeout_min: 0.7}\n")  # 42 s: a 30 s start
    results = tmp_path / "results"
    r = ablate("sweep", "recipes/quickstart.yaml", "--profile", str(prof), "--results",
               str(results))
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert "cannot reach its budget under this profile" in line and "requeues" in line
    assert "the profile allows 3 requeues (the executor default)" in line
    assert "raise local.timeout_min" in line and "--force" in line
    assert not results.exists()
    from ablate.studies.sweep import plan_sweep

    plan = plan_sweep("recipes/quickstart.yaml", profile=str(prof), results=results, force=True)
    assert len(plan.submit) == 4 and not results.exists()


@pytest.mark.slow
def test_dry_run_json_carries_the_time_plan_and_where_jobs_go():
    """The paper study under slurm_gpu (`max_num_timeout: auto`): each run's requeues needed
    and the max_num_timeout its jobs would get (derived, with headroom); it reaches."""
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)
    for run in runs:
        res, where = run["resources"], run["launch"]
        assert res["step_s"] > 0 and res["eval_s"] > res["step_s"] and res["wall_h"] > 0
        assert res["gpu_hours"] == pytest.approx(res["wall_h"] * 16)
        assert res["reaches_budget"] is True and not res["time"]["problem"]
        assert res["max_requeues"] is None and res["requeues_needed"] > 50
        assert res["max_num_timeout"] == auto_max_num_timeout(res["requeues_needed"])
        assert res["time"]["eval_jobs"] > 1 and where["max_num_timeout"] == "auto"
        assert where["executor"] == "slurm" and where["partition"] == "gpu"
        assert where["time_min"] == 240 and where["gpus_per_node"] == 8


@pytest.mark.slow
def test_dry_run_text_says_where_warns_without_gpu_size_and_cuts_no_name():
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    flat = " ".join(out.split())  # the text as said, whatever the width folded (100 piped)
    assert "where: executor slurm (the profile's executor" in flat
    assert "partition gpu" in flat and "time limit 240 min per job, requeues as each run's " \
        "plan derives (max_num_timeout auto)" in flat
    assert "CANNOT REACH THE BUDGET" not in flat and "requeues needed (max_num_timeout auto: " in flat
    assert "time on H100 SXM" in flat and "eval " in flat and "(blocks training)" in flat
    # Piped (a subprocess): every variant name whole, on one line with its run id.
    for name in ("loss.aggregation=sample", "loss.aggregation=prompt", "loss.aggregation=token"):
        assert any(line.rstrip().endswith(name) for line in out.splitlines()), name
    assert "…" not in out
    bare = ablate("sweep", "recipes/loss_agg.yaml", "--dry-run", "--executor", "local")
    assert bare.returncode == 0, bare.stderr
    bare_flat = " ".join(bare.stdout.split())
    assert "warning: the memory plan (up to" in bare_flat
    assert "not checked against any GPU" in bare_flat
    assert "where: executor local (--executor; no launch profile" in bare_flat
    assert "no time estimate: GPUs not known here" in bare_flat


@pytest.mark.slow
def test_dry_run_shows_a_command_trainers_command(tmp_path):
    script = ROOT / "tests" / "_command_trainer.py"
    study = tmp_path / "cmd.yaml"
    study.write_text(
        f"name: cmd\ntrainer:\n  kind: command\n  command: {sys.executable} {script} "
        "{overrides} --seed {seed} --out {run_dir} {resume}\n  resume: --resume\n"
        "  keys: [lr, steps]\n  log: metrics.jsonl\n"
        "fit: {y: score}\noverrides: {steps: 30}\naxes:\n  lr: [0.05, 0.2]\nseeds: [0]\n")
    results = tmp_path / "res"
    r = ablate("sweep", str(study), "--dry-run", "--executor", "local", "--results", str(results))
    assert r.returncode == 0, r.stderr
    runs = json.loads(ablate("sweep", str(study), "--dry-run", "--json", "--executor", "local",
                             "--results", str(results)).stdout)
    for run in runs:
        cmd = run["command"]
        assert str(script) in cmd and f"--seed {run['seed']}" in cmd
        assert f"--out {results / 'cmd' / run['run_id']}" in cmd and "--resume" not in cmd
        # folded between arguments at the width with ` \` (a shell joins them back)
        assert f"{run['run_id']} {run['name']} seed 0: {cmd}" in r.stdout.replace(" \\\n    ", " ")
    assert max(len(x) for x in r.stdout.splitlines()) <= 100, r.stdout
    assert not results.exists()  # the dry run wrote nothing


def test_with_the_eval_service_eval_runs_beside_training_and_a_stop_saves_at_once():
    """With trainer/generation/service.py (eval beside training, a stop saving the last
    finished step at once): eval no longer blocks the steps, an eval longer than a job ends
    over several (its chunks kept), and a job keeps its steps without a 35-minute
    signal_delay_s: the warning needs only a checkpoint plus the stop's margin."""
    import trainer.plan.time_model as time_model

    from dataclasses import replace

    one = replace(PAPER_SHAPE, nodes=1)  # (on several nodes evals pause rollouts: issue 46)
    c = paper(eval={"num_prompts": 50})
    before = plan_time(paper(eval={"num_prompts": 2}, **LOCKSTEP), one, PAPER_LIMITS)
    after = plan_time(c, one, PAPER_LIMITS)
    assert before.eval_blocks_training and not after.eval_blocks_training
    assert not time_model.stop_saves_at_once(paper(**LOCKSTEP))
    assert time_model.stop_saves_at_once(c)
    assert before.steps_per_job == 0 and after.steps_per_job > 0
    assert not any("signal_delay_s" in w for w in after.warnings)
    long_eval = plan_time(paper(eval={"num_prompts": 200}), one, PAPER_LIMITS)
    assert long_eval.eval_jobs > 1 and "eval" not in long_eval.problem
    # The signal window: a checkpoint (57 s at 8B) plus 60 s of margin, not a step.
    ck = after.checkpoint_s
    short = plan_time(c, one, Limits(time_min=240, max_requeues=10_000,
                                     signal_delay_s=int(ck + 40), gpu_model="h100"))
    warned = [w for w in short.warnings if "signal_delay_s" in w]
    assert warned and "less than a checkpoint" in warned[0] and "a step plus" not in warned[0]
    ok = plan_time(c, one, Limits(time_min=240, max_requeues=10_000,
                                  signal_delay_s=int(ck + 61), gpu_model="h100"))
    assert not any("signal_delay_s" in w for w in ok.warnings)
    # An eval due every step that takes longer than a step: evals queue up (said, not refused).
    often = plan_time(paper(eval={"num_prompts": 50, "every_steps": 1}), one, PAPER_LIMITS)
    assert any("evals queue up" in w for w in often.warnings), often.warnings


@pytest.mark.slurm
def test_dry_run_with_no_profile_on_a_slurm_machine_says_where_and_warns():
    """Issue 32: no profile where `sinfo` answers: the runs go to Slurm with its default
    settings (no GPUs). Issue 40: the 8B study is refused there in one line naming the GPU
    profile, exit 2 (ablate/studies/gpu_need.py); with --force the dry run says where the
    runs go and warns that the 8B plan is checked against no GPU size."""
    from ablate.studies.launch import slurm

    if not slurm.available():
        pytest.skip("no Slurm cluster: run `bash tests/slurm/cluster.sh start`")
    r = ablate("sweep", "recipes/loss_agg.yaml", "--dry-run", "--override", "seeds=[0]")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "needs GPUs" in r.stderr and "use --profile slurm_gpu" in r.stderr, r.stderr
    assert "no launch profile, Slurm's defaults" in r.stderr and not r.stdout, r.stderr
    r = ablate("sweep", "recipes/loss_agg.yaml", "--dry-run", "--override", "seeds=[0]",
               "--force")
    assert r.returncode == 0, r.stderr
    # each fact folded at the width under its own indent (issue 52): read back as one line
    first, second = r.stdout.replace("\n    ", " ").splitlines()[:2]
    assert first.startswith("where: executor slurm (no executor named; Slurm answers here")
    assert "no launch profile" in first and "time limit 60 min per job" in first
    assert second.startswith("warning: the memory plan (up to 150.") and "no GPUs" in second


@pytest.mark.parametrize("per_decade", [None, 3, 8])
def test_eval_count_is_the_trainers_eval_due_walk(per_decade):
    """count_evals counts without walking every step; it must equal step 0 + every step
    eval.due accepts + the last."""
    from trainer.plan.time_model import count_evals

    for every in (1, 7, 100):
        c = TrainConfig.model_validate({"eval": {"every_steps": every, "per_decade": per_decade}})
        for steps in (1, 2, 10, 100, 101, 781, 2000):
            walk = 1 + sum(1 for s in range(1, steps) if c.eval.due(s)) + 1
            assert count_evals(c, steps) == walk, (every, steps)


def test_slurm_executor_gets_the_requeues_the_plan_derives(tmp_path):
    """`max_num_timeout: auto` (sweeps/slurm_gpu.yaml): the executor `ablate sweep` submits
    through is built with the most requeues its runs' plans derive (with headroom); an
    integer in the profile is passed as it is. Built, not submitted (no sbatch needed)."""
    from ablate.studies.launch import slurm
    from ablate.studies.launch.profile import Profile, load_profile
    from ablate.studies.sweep import resources_of

    prof = load_profile(Path("sweeps/slurm_gpu.yaml"))
    assert prof.slurm.max_num_timeout == "auto"

    shape, limits = prof.job_shape("slurm"), prof.limits("slurm")
    small = resources_of(paper(budget={"steps": 200}), tmp_path / "small", shape, limits)
    big = resources_of(paper(), tmp_path / "big", shape, limits)
    need = plan_time(paper(), shape, limits).requeues
    assert need > plan_time(paper(budget={"steps": 200}), shape, limits).requeues
    n = slurm.max_num_timeout([small, big], prof)
    assert n == auto_max_num_timeout(need) and n > need
    ex = slurm.executor(tmp_path / "submitit", prof.slurm, "ablate-test", n,
                        slurm.tasks_per_node(big, prof))
    assert ex.max_num_timeout == n  # what submitit puts in each job's countdown
    capped = Profile.model_validate({**prof.model_dump(), "slurm": {
        **prof.slurm.model_dump(), "max_num_timeout": 7}})
    assert slurm.max_num_timeout([small, big], capped) == 7
    assert capped.limits("slurm").max_requeues == 7


@pytest.mark.slow
def test_max_num_timeout_that_is_neither_auto_nor_a_count_is_one_line(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("executor: slurm\nslurm:\n  max_num_timeout: lots\n")
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(f), "--dry-run")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "max_num_timeout" in line, line


@pytest.mark.parametrize("limits", [PAPER_LIMITS, Limits(time_min=60 * 24 * 90)])
def test_the_wall_in_parts_sums_to_the_wall(limits):
    """Issue 52 point 1: steps, evals, checkpoints, job starts and job ends add up to the wall
    shown, under many requeued jobs and in one job (no job end then); the dry run prints them
    with what would cut the largest part beside the steps."""
    from ablate.cli.dryrun import wall_parts_lines

    t = plan_time(paper(budget={"gpu_hours": 4000}), PAPER_SHAPE, limits)
    parts = t.wall_parts_h
    assert set(parts) == {"steps", "evals", "checkpoints", "job starts", "refills", "job ends"}
    assert sum(parts.values()) == pytest.approx(t.wall_h, rel=1e-9)
    assert parts["steps"] == pytest.approx(t.steps * t.step_s / 3600)
    assert parts["job starts"] == pytest.approx(t.jobs * JOB_START_S_GPU / 3600)
    # pipeline with vLLM: each job's first step waits for a whole generation (issue 47 point 6)
    assert parts["refills"] == pytest.approx(
        t.jobs * min(t.generation_s, t.train_s) / 3600) and parts["refills"] > 0
    assert (parts["job ends"] > 0) == (t.jobs > 1), (t.jobs, parts)
    line = " ".join(wall_parts_lines(t))
    assert line.startswith("  wall in parts: steps ") and "the largest beside the steps" in line
