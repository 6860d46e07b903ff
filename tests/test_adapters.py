"""Studies on other trainers (ablate/adapters): TRL's GRPOTrainer on CPU, a command, verl keys.

Real processes throughout: the TRL runs train a tiny char Llama built here with GRPOTrainer,
launched by `ablate sweep` through the local executor, and `ablate compare` fits them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _study_util import ROOT, release_requeued, states, wait_until
from _study_util import cli as study_cli
from ablate.errors import InputError

def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real entry point without tests/ on the path (its `vllm` folder would break TRL)."""
    return study_cli(*args, timeout=timeout, tests_on_path=False)


def cli_json(*args: str, timeout: float = 300):
    r = cli(*args, "--json", timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


# The eval is what a TRL run here spends most on: TRL's default share (0.2: 40 prompts x 8
# completions in 10 batches every 2 steps) made the three TRL studies ~460 s of CI; 10 prompts
# in one batch of 80 still give a curve from 0 to 1 that compare fits.
TRL_OVERRIDES = """  use_cpu: true
  bf16: false
  gradient_checkpointing: false
  report_to: none
  per_device_train_batch_size: 32
  per_device_eval_batch_size: 80
  eval_fraction: 0.05
  num_generations: 8
  max_completion_length: 4
  learning_rate: 0.01
  lr_scheduler_type: constant
  beta: 0.0
  logging_steps: 2
  eval_strategy: steps
  eval_steps: 2
  save_steps: 10
  dataloader_num_workers: 0
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 1-layer, 32-wide char Llama and 200 prompts whose answer is "1111" (reward: the share
    of characters right), which GRPO learns in a few dozen steps on a CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.models.tokenizer import char_tokenizer

    d = tmp_path_factory.mktemp("trl")
    torch.manual_seed(0)
    tok = char_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    r = random.Random(0)
    rows = [{"prompt": f"{r.randint(10, 99)}+{r.randint(10, 99)}=", "answer": "1111"}
            for _ in range(200)]
    (d / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return d


def trl_study(folder: Path, tiny: Path, axes: str, *, steps: int = 40, name: str = "trl") -> Path:
    text = (f"name: {name}\ntrainer: {{kind: trl}}\noverrides:\n"
            f"  model_name_or_path: {tiny / 'model'}\n  dataset: {tiny / 'data.jsonl'}\n"
            f"{TRL_OVERRIDES}axes:\n{axes}\nseeds: [0]\nbudget: {{steps: {steps}}}\n")
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_trl_keys_checked_before_submitting(tmp_path, tiny):
    """A misspelled GRPOConfig key, an ablate-only knob TRL cannot express, and an ablate key
    TRL names differently: one line each, exit 2, nothing written."""
    cases = {"  loss_typ: [dapo, grpo]": "'loss_typ' is not a GRPOConfig field (did you mean 'loss_type'?)",
             "  data.zero_variance_filter: [true, false]": "cannot be expressed in TRL",
             "  loss.aggregation: [token, sample]": "in TRL use 'loss_type'"}
    for axes, want in cases.items():
        study = trl_study(tmp_path, tiny, axes)
        r = cli("sweep", str(study), "--results", str(tmp_path / "res"), "--dry-run")
        assert r.returncode == 2, r.stderr
        assert want in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "res").exists()


def run_trl_study(tmp_path: Path, tiny: Path, executor: str, stages: bool = False,
                  losses: tuple[str, ...] = ("dapo", "grpo")) -> None:
    """TRL loss types (`losses`), one seed, 40 GRPO steps each, through `executor`; `status`
    shows each run's step from TRL's log; `compare` fits every curve (num_tokens vs
    eval_reward). `stages`: adaptive, a stage at 20 steps (`sweep --wait` fits it, stops what
    cannot win, and resumes the rest from their checkpoint-20 to 40)."""
    study = trl_study(tmp_path, tiny, f"  loss_type: [{', '.join(losses)}]")
    if stages:
        study.write_text(study.read_text() + "stages: {budgets: [{steps: 20}], scale_winner: true}\n")
    res = tmp_path / "res"
    names = [f"loss_type={x}" for x in losses]
    dry = cli_json("sweep", str(study), "--results", str(res), "--dry-run")
    assert [v["name"] for v in dry] == names
    assert dry[0]["config"]["budget"]["steps"] == 40 and "max_steps" not in dry[0]["config"]["overrides"]
    out = cli_json("sweep", str(study), "--results", str(res), "--executor", executor,
                   *(["--wait"] if stages else []), timeout=900)  # CI: ~70 s; slack for load
    assert out["executor"] == executor
    # --wait's answer is its last round (stage 2's submissions, or none once all ran)
    assert (out["finished"] and out["stage"] == 1) if stages else \
        len(out["submitted"]) == len(losses), out
    stopped = set(out["decisions"][0]["stopped"]) if stages else set()
    from ablate.studies.status import study_states

    def finished():
        s = study_states(res / "trl")
        return s if all(x.state in ("done", "failed") for x in s) else None

    states = wait_until(finished, timeout=900, poll=3, what="TRL runs")
    assert [(s.state, s.step) for s in states] == [
        ("done", 20 if s.name in stopped else 40) for s in states], states
    fits = cli_json("compare", str(res / "trl"))["rows"]
    assert sorted(f["variant"] for f in fits) == names
    for f in fits:
        assert f["n_points"] >= 8 and 0 < f["A"] <= 1.0, f
    for s in states:
        rows = [json.loads(x) for x in (res / "trl" / s.run_id / "trl" / "log.jsonl")
                .read_text().splitlines()]
        want = 20 if s.name in stopped else 40  # each train row once: stage 2 resumed at 20
        assert [r["step"] for r in rows if "loss" in r] == list(range(2, want + 1, 2)), rows
        assert any("eval_reward" in x for x in rows)
    if stages and not stopped:
        cmd = json.loads((res / "trl" / states[0].run_id / "status.json").read_text())["command"]
        assert cmd[-2:] == ["--resume_from_checkpoint", "true"] and \
            cmd[cmd.index("--max_steps") + 1] == "40"


@pytest.mark.slow
def test_trl_adaptive_study_local_then_compare(tmp_path, tiny):
    run_trl_study(tmp_path, tiny, "local", stages=True)


@pytest.mark.slurm
def test_trl_study_on_slurm_then_compare(tmp_path, tiny):
    from ablate.studies.launch import slurm

    if os.environ.get("ABLATE_TEST_SLURM") != "1" and not slurm.available():
        pytest.skip("no Slurm cluster: run `bash tests/slurm/cluster.sh start`")
    # One loss type: what Slurm adds (an array, sacct states, TRL's log read back) shows on
    # one run; two loss types through the same code run in the local adaptive study above.
    run_trl_study(tmp_path, tiny, "slurm", losses=("dapo",))


def preempt_runner(raw: dict, run_dir: Path, ready) -> int:
    """Run `run_foreign` in a process with the job's USR2 flag handler; once `ready()`, send
    USR2 to it and to the trainer it started, as Slurm does to every process of a job step
    on preemption. Returns the step the runner says the trainer stopped at."""
    p = subprocess.Popen([sys.executable, "-c", RUN_WITH_USR2_FLAG, json.dumps(raw), str(run_dir)],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        wait_until(ready, 120, 0.05, "the trainer to get going")
        kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        for pid in [p.pid, *map(int, kids)]:
            os.kill(pid, signal.SIGUSR2)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return int(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_preempted_then_killed_trl_run_resumes_from_its_checkpoints(tmp_path, tiny):
    """A TRL run preempted (USR2) at step ~3 saves checkpoint-N there (the TRL entry saves on
    the runner's SIGTERM) and the next attempt resumes from it; that attempt, killed with its
    job after its step-10 checkpoint, is resumed by a third through `--resume_from_checkpoint`
    from step 10 to 20. No logged step is trained twice."""
    from ablate.adapters import adapter_class
    from ablate.adapters.runner import run_foreign
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    study = trl_study(tmp_path, tiny, "  loss_type: [dapo]", steps=20)
    raw = expand(load_study(study))[0].config.model_dump(mode="json")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "trl" / "log.jsonl"
    n = preempt_runner(raw, run_dir, lambda: log.exists() and log.read_text().count("\n") >= 2)
    assert 2 <= n < 10 and (run_dir / "trl" / f"checkpoint-{n}").is_dir(), n
    assert json.loads((run_dir / "status.json").read_text())["preemptions"] == [
        {"stopped_at_step": n, "exit": 0}]
    code = ("import json,sys; from pathlib import Path; from ablate.adapters import adapter_class; "
            "from ablate.adapters.runner import run_foreign; raw = json.loads(sys.argv[1]); "
            "run_foreign(raw, Path(sys.argv[2]), adapter_class(raw))")
    p = subprocess.Popen([sys.executable, "-c", code, json.dumps(raw), str(run_dir)],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    try:
        wait_until(lambda: (run_dir / "trl" / "checkpoint-10" / "trainer_state.json").exists(),
                   timeout=120, poll=0.05, what="checkpoint-10")  # kill before checkpoint-20
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the job dies; its trainer with it (PDEATHSIG)
        p.wait()
    assert not (run_dir / "trl" / "checkpoint-20").exists(), "run finished before the kill"
    run_foreign(raw, run_dir, adapter_class(raw))
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "done" and status["step"] == 20
    assert status["command"][-2:] == ["--resume_from_checkpoint", "true"]
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    # One train row and one eval row per logged step (every 2) up to checkpoint-10: nothing
    # before checkpoint-N or checkpoint-10 was trained again (steps the kill caught after
    # checkpoint-10 are redone: a kill saves nothing), and every step up to the budget.
    for kind in ("loss", "eval_reward"):
        got = [r["step"] for r in rows if kind in r]
        assert [x for x in got if x <= 10] == [2, 4, 6, 8, 10], (kind, got)
        assert sorted(set(got)) == list(range(2, 21, 2)), (kind, got)
    assert (run_dir / "trl" / "checkpoint-20").is_dir()


@pytest.mark.slow
def test_command_trainer_study(tmp_path):
    """`kind: command`: a template over tests/_command_trainer.py; the crashed run resumes
    with the study's `resume:` flag; compare fits the curves it wrote."""
    script = ROOT / "tests" / "_command_trainer.py"
    study = tmp_path / "cmd.yaml"
    study.write_text(
        f"name: cmd\ntrainer:\n  kind: command\n  command: {sys.executable} {script} "
        "{overrides} --seed {seed} --out {run_dir} {resume}\n  resume: --resume\n"
        "  keys: [lr, steps, stop_at]\n  step_cost: 2.0\n  log: metrics.jsonl\n"
        "fit: {y: score}\noverrides: {steps: 30, stop_at: 12}\naxes:\n  lr: [0.05, 0.2]\n"
        "seeds: [0]\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(study.read_text().replace("  lr: [", "  lrr: ["))
    r = cli("sweep", str(bad), "--results", str(tmp_path / "res"), "--dry-run")
    assert r.returncode == 2 and "'lrr' is not a key of this command (trainer.keys) (did you mean 'lr'?)" in r.stderr
    res = tmp_path / "res"
    cli("sweep", str(study), "--results", str(res), "--executor", "debug", "--json")
    from ablate.studies.status import study_states

    first = study_states(res / "cmd")  # the debug executor runs jobs before recording them
    assert {s.state for s in first} <= {"failed", "interrupted"}
    for s in first:
        status = json.loads((res / "cmd" / s.run_id / "status.json").read_text())
        assert (status["state"], status["step"]) == ("failed", 12)  # exit 3 at step 12
    out = cli_json("sweep", str(study), "--results", str(res), "--executor", "debug")
    assert len(out["submitted"]) == 2
    states = study_states(res / "cmd")
    assert [(s.state, s.step) for s in states] == [("done", 30), ("done", 30)]
    for s in states:
        steps = [json.loads(x)["step"] for x in (res / "cmd" / s.run_id / "metrics.jsonl")
                 .read_text().splitlines()]
        assert steps == list(range(1, 31))  # resumed at 13: no step twice, none missing
    fits = {f["variant"]: f for f in cli_json("compare", str(res / "cmd"))["rows"]}
    assert set(fits) == {"lr=0.05", "lr=0.2"}
    assert fits["lr=0.2"]["A"] == pytest.approx(0.9, abs=0.1)


def command_study(folder: Path, name: str, body: str) -> Path:
    """A `kind: command` study over tests/_command_trainer.py (`body`: its axes, budget, ...)."""
    script = ROOT / "tests" / "_command_trainer.py"
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ntrainer:\n  kind: command\n  command: {sys.executable} {script} "
        "{overrides} --seed {seed} --out {run_dir} {resume}\n  resume: --resume\n"
        "  keys: [lr, steps, stop_at, step_s, top]\n  step_cost: 2.0\n  log: metrics.jsonl\n"
        f"fit: {{y: score}}\n{body}")
    return path


@pytest.mark.slow
def test_command_trainer_adaptive_study(tmp_path):
    """`stages:` on another trainer: every variant trains to the stage's 12 steps (the budget
    reaches the command as `--steps 12`); the variant whose curve flattens at 0.3 is stopped
    (its A interval lies below the one at 0.9); the survivor (scale_winner) is promoted and
    resumed by the trainer's own `--resume` to the final 30 steps, no step twice, none missing."""
    study = command_study(tmp_path, "adc", "overrides: {lr: 0.4}\naxes:\n  top: [0.9, 0.3]\n"
                          "seeds: [0]\nbudget: {steps: 30}\n"
                          "stages: {budgets: [{steps: 12}], baseline: top=0.9, scale_winner: true}\n")
    res = tmp_path / "res"
    out = cli_json("sweep", str(study), "--results", str(res), "--executor", "debug", "--wait")
    assert out["finished"] and out["stage"] == 1, out
    (dec,) = out["decisions"]
    assert list(dec["stopped"]) == ["top=0.3"] and "top=0.9's A lower bound" in dec["stopped"]["top=0.3"]
    sd = res / "adc"
    for v in json.loads((sd / "variants.json").read_text()):
        d = sd / v["run_id"]
        steps = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()]
        want = 12 if v["name"] == "top=0.3" else 30
        assert steps == list(range(1, want + 1)), (v["name"], steps)
        cmd = json.loads((d / "status.json").read_text())["command"]
        assert cmd[cmd.index("--steps") + 1] == str(want)
        assert ("--resume" in cmd) == (want == 30)  # the survivor's second stage resumed
    fits = {f["variant"]: f for f in cli_json("compare", str(sd))["rows"]}
    assert fits["top=0.3"]["stopped"]["stage"] == 0 and fits["top=0.9"]["stopped"] is None


RUN_WITH_USR2_FLAG = (
    "import json, signal, sys; from pathlib import Path; from trainer.dist import preempt; "
    "from ablate.adapters import adapter_class; from ablate.adapters.runner import run_foreign; "
    "preempt.install(signal.SIGUSR2); raw = json.loads(sys.argv[1]); "
    "run_foreign(raw, Path(sys.argv[2]), adapter_class(raw)); print(preempt.stopped_at())")


@pytest.mark.slow
def test_preempted_command_run_stops_its_trainer_and_resumes(tmp_path):
    """USR2 as Slurm sends it on preemption, to the job process and to the trainer's process:
    the trainer ignores Slurm's USR2 (it would kill it), ablate's runner forwards its stop
    signal (SIGTERM), the trainer saves at the step boundary and exits, the runner records
    the stop and marks the attempt stopped (the job then requeues it); the next attempt
    resumes through `--resume` from that step: no step twice, none missing."""
    from ablate.adapters import adapter_class
    from ablate.adapters.runner import run_foreign
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    study = command_study(tmp_path, "pre", "overrides: {lr: 0.2, step_s: 0.05}\n"
                          "axes:\n  top: [0.9]\nbudget: {steps: 60}\n")
    raw = expand(load_study(study))[0].config.model_dump(mode="json")
    d = tmp_path / "run"
    d.mkdir()
    p = subprocess.Popen([sys.executable, "-c", RUN_WITH_USR2_FLAG, json.dumps(raw), str(d)],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        kids = wait_until(lambda: Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
                          if (d / "ckpt.json").exists() else None, 60, 0.05, "the trainer")
        wait_until(lambda: json.loads((d / "ckpt.json").read_text())["step"] >= 5, 60, 0.05, "step 5")
        for pid in [p.pid, *map(int, kids)]:  # what Slurm does: every process of the step
            os.kill(pid, signal.SIGUSR2)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    stopped = int(out.strip().splitlines()[-1])
    assert (d / "stops.log").read_text() == f"stopped at step {stopped}\n"  # saved on SIGTERM
    status = json.loads((d / "status.json").read_text())
    assert status["state"] == "running" and status["preemptions"] == [
        {"stopped_at_step": stopped, "exit": 0}] and 5 <= stopped < 60
    run_foreign(raw, d, adapter_class(raw))  # the requeued attempt
    status = json.loads((d / "status.json").read_text())
    assert (status["state"], status["step"]) == ("done", 60) and "--resume" in status["command"]
    assert len(status["preemptions"]) == 1 and status["gpu_hours"] > 0
    steps = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 61))


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout


@pytest.mark.slurm
def test_command_run_preempted_on_slurm_is_requeued_and_resumes(tmp_path):
    """On the real Slurm cluster: `scancel --signal=USR2` (what preemption delivers to every
    process of the job) mid-run; the runner stops the command trainer with SIGTERM (it saves
    at the step boundary), submitit requeues the same job, and the next attempt resumes with
    `--resume` from that step: every step logged exactly once."""
    from ablate.studies.launch import slurm

    if os.environ.get("ABLATE_TEST_SLURM") != "1" and not slurm.available():
        pytest.skip("no Slurm cluster: run `bash tests/slurm/cluster.sh start`")
    study = command_study(tmp_path, "spre", "overrides: {lr: 0.2, step_s: 0.1}\n"
                          "axes:\n  top: [0.9]\nbudget: {steps: 60}\n")
    (rid,) = cli_json("sweep", str(study), "--results", str(tmp_path / "res"),
                      "--executor", "slurm")["submitted"]
    sd = tmp_path / "res" / "spre"
    d = sd / rid
    job = states(sd)[rid]["job_id"].split(":")[1]
    wait_until(lambda: (d / "ckpt.json").exists() and
               json.loads((d / "ckpt.json").read_text())["step"] >= 5, 120, 0.05, "step 5")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    signalled = time.time()

    def finished():  # Slurm holds a requeued job back a while: release it now
        release_requeued(job, signalled)
        st = json.loads((d / "status.json").read_text())
        return st if st["state"] in ("done", "failed") else None

    st = wait_until(finished, 240, 0.5, "the requeued run to finish")
    (pre,) = st["preemptions"]
    assert st["state"] == "done" and st["step"] == 60 and "--resume" in st["command"], st
    assert (d / "stops.log").read_text() == f"stopped at step {pre['stopped_at_step']}\n"
    assert pre["exit"] == 0 and 5 <= pre["stopped_at_step"] < 60
    steps = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 61))
    assert states(sd)[rid]["job_id"] == f"slurm:{job}"  # the same job, requeued
    assert "REQUEUE" in _sh("sacct", "-D", "-n", "-X", "-P", "-o", "State", "-j", job)


@pytest.mark.slow
def test_budgets_ablate_measures_stop_the_trainer(tmp_path):
    """A budget in gpu_hours (wall x devices, measured by ablate) and one on a logged column
    (`trainer.stop_when`, the fit's compute axis): the trainer is stopped with its stop signal
    once it is reached and the run is done; a rerun starts nothing. A flops budget, which no
    other trainer logs, and a stop_when on a non-JSONL log are refused in one line."""
    from ablate.adapters import adapter_class
    from ablate.adapters.runner import run_foreign
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    body = "overrides: {{lr: 0.2, step_s: 0.05, steps: 100000}}\naxes:\n  top: [0.9]\nbudget: {b}\n"
    refused = {"{flops: 1.0e+12}": ("cannot be held to a flops budget (it logs none per step); "
                                    "use steps (passed as steps) or gpu_hours"),
               "{steps: 10}\n": "trainer.stop_when is read from a JSONL log while the run goes"}
    for b, msg in refused.items():
        bad = command_study(tmp_path, "bad", body.format(b=b))
        if "stop_when" in msg:
            bad.write_text(bad.read_text().replace("  log: metrics.jsonl\n", "  log: tb\n  "
                                                   "stop_when: {tokens: 10}\n"))
        r = cli("sweep", str(bad), "--results", str(tmp_path / "res"), "--dry-run")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert msg in r.stderr, r.stderr

    def run(name: str, budget: str, extra: str = "") -> tuple[dict, float, Path]:
        study = command_study(tmp_path, name, body.format(b=budget))
        study.write_text(study.read_text().replace("  log: metrics.jsonl\n", f"  log: metrics.jsonl\n{extra}"))
        raw = expand(load_study(study))[0].config.model_dump(mode="json")
        d = tmp_path / name
        d.mkdir()
        t0 = time.monotonic()
        run_foreign(raw, d, adapter_class(raw))
        took = time.monotonic() - t0
        status = json.loads((d / "status.json").read_text())
        assert status["state"] == "done" and (d / "stops.log").read_text() == \
            f"stopped at step {status['step']}\n"  # the trainer saved on its stop signal
        run_foreign(raw, d, adapter_class(raw))  # rerun: the budget is spent, nothing starts
        assert json.loads((d / "status.json").read_text())["step"] == status["step"]
        return status, took, d

    status, took, _ = run("gh", "{gpu_hours: 0.0008}")  # 2.88 s on one CPU device
    assert "gpu_hours budget 0.0008 reached (exit 0)" in status["stopped"]
    # Never before the budget; stopped by ablate's signal (stops.log, checked in run()), long
    # before its own 100,000 steps (~83 min). How soon after the budget depends on the
    # machine's load (the runner checks every 0.5 s), so it is printed, not asserted.
    assert status["gpu_hours"] * 3600 >= 2.88 and status["step"] < 100_000, (status, took)
    print(f"gpu_hours stop: {status['gpu_hours'] * 3600:.2f} s measured, {took:.1f} s wall")
    status, _, d = run("sw", "{steps: 100000}", "  stop_when: {tokens: 1500}\n")
    # tokens reach 1500 at step 15 (100 a step): never before, and stopped by the signal.
    assert status["stopped"].startswith("tokens 1500 reached (") and \
        15 <= status["step"] < 100_000, status
    steps = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, status["step"] + 1))


def _verl_config_dir() -> Path | None:
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    given = os.environ.get("ABLATE_TEST_VERL_CONFIG")  # a `pip install --no-deps --target` copy
    return Path(given) if given else None


@pytest.mark.slow  # Hydra composes verl's whole config: 2.4 s of CPU in CI's fast tier
def test_verl_overrides_composed_with_verls_config(tmp_path):
    """verl's own Hydra config (from the verl package) composes each variant: a misspelled
    key is one line naming the nearest; a valid one expands to Hydra `key=value` words."""
    d = _verl_config_dir()
    if d is None or not (d / "ppo_trainer.yaml").is_file():
        pytest.skip("verl not installed (pip install 'ablate[verl]', or "
                    "ABLATE_TEST_VERL_CONFIG=<verl>/trainer/config)")
    pytest.importorskip("hydra")
    from ablate.studies.expand import expand as expand_foreign  # a verl study's variants
    from ablate.studies.study import load_study

    def study(axis: str) -> Path:
        p = tmp_path / "verl.yaml"
        p.write_text(f"name: v\ntrainer: {{kind: verl, config_dir: {d}}}\naxes:\n  {axis}: "
                     "[token-mean, seq-mean-token-mean]\nbudget: {steps: 100}\n")
        return p

    vs = expand_foreign(load_study(study("actor_rollout_ref.actor.loss_agg_mode")))
    assert [v.name for v in vs] == ["actor_rollout_ref.actor.loss_agg_mode=token-mean",
                                    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]
    from ablate.adapters import adapter_for

    adapter = adapter_for(vs[1].config.trainer)
    argv = adapter.argv(adapter.run_overrides(vs[1].config), 0, tmp_path, False)
    assert "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean" in argv
    assert "trainer.total_training_steps=100" in argv and "trainer.resume_mode=auto" in argv
    with pytest.raises(InputError, match=r"'actor_rollout_ref\.actor\.loss_agg_mod' is not a key "
                       r"of verl's ppo_trainer \(did you mean 'actor_rollout_ref\.actor\.loss_agg_mode'"):
        expand_foreign(load_study(study("actor_rollout_ref.actor.loss_agg_mod")))
    with pytest.raises(InputError, match="cannot be expressed in verl"):
        load_study(study("data.no_positive_resampling"))


def test_overrides_rendered_in_each_trainers_syntax(tmp_path, tiny):
    """argparse `--key value`, Hydra `key=value` (lists as [a,b]), a JSON config file; a
    command placeholder keeps a value with spaces as one word; `--override` on a TRL study
    is checked against GRPOConfig like an axis."""
    from ablate.adapters.base import TrainerSpec, argparse_args, hydra_args
    from ablate.adapters.command import CommandAdapter
    from ablate.studies.study import load_study

    assert argparse_args({"lr": 0.1, "bf16": False}) == ["--lr", "0.1", "--bf16", "false"]
    assert hydra_args({"trainer.logger": ["console", "file"], "x": None}) == \
        ["trainer.logger=[console,file]", "x=null"]
    spec = TrainerSpec(kind="command", command="train {overrides} --out={run_dir} {resume}",
                       resume="--resume yes", override_style="json")
    (tmp_path / "r 1").mkdir()
    argv = CommandAdapter(spec).argv({"name": "a b"}, 3, tmp_path / "r 1", True)
    assert argv == ["train", str(tmp_path / "r 1" / "overrides.json"),
                    f"--out={tmp_path / 'r 1'}", "--resume", "yes"]
    assert json.loads(Path(argv[1]).read_text()) == {"name": "a b"}
    assert CommandAdapter(spec).argv({}, 3, tmp_path / "r 1", False)[-1] == f"--out={tmp_path / 'r 1'}"
    study = trl_study(tmp_path, tiny, "  loss_type: [dapo, grpo]")
    assert load_study(study, ["learning_rate=0.02"]).base_tree["learning_rate"] == 0.02
    with pytest.raises(InputError, match=r"--override learning_rat=0.1: 'learning_rat' is not a "
                       r"GRPOConfig field \(did you mean 'learning_rate'\?\)"):
        load_study(study, ["learning_rat=0.1"])
