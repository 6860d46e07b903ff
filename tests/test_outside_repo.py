"""ablate as a new user meets it: the installed `ablate` console script, run from a folder of
their own outside this repository, on study files of their own (issue 32).

The shipped recipes and launch profiles are found by name from any folder (and a user's file
of that name wins); a missing name lists each place looked at once; a `fit:` typo is refused
before anything is submitted; `ablate init` writes a starter study; `sweep --wait` exits
non-zero when runs fail and `ablate status` says why in one line; Ctrl-C of `sweep --wait`
stops the waiting with one line, not the runs. The wheel `pip` builds carries every recipe and
profile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from _cli import ablate_script, sigint_as_in_a_terminal
from _study_util import TINY_OVERRIDES, wait_until

ROOT = Path(__file__).resolve().parents[1]
ABLATE = shutil.which("ablate")
needs_script = pytest.mark.skipif(ABLATE is None, reason="no `ablate` console script on PATH "
                                  "(pip install the package)")


def user_env() -> dict[str, str]:
    """This tree's code (and tests/ for the stand-in entries), a 100-column terminal."""
    return dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}", COLUMNS="100")


def ablate(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """The console script in `cwd`, as user_env() sets it up."""
    return ablate_script(*args, cwd=cwd, timeout=timeout)


def looked_for(err: str) -> list[str]:
    m = re.search(r"\(looked for (.*?)\)", err)
    assert m, err
    return m.group(1).split(", ")


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


def _wheel_build_reason() -> str | None:
    """Why `pip wheel --no-build-isolation` cannot build here (None: it can): it uses the
    installed setuptools, which must be what pyproject's build-system asks (>= 68) and build
    wheels (its own bdist_wheel from 70.1, else the `wheel` package)."""
    try:
        import setuptools
    except ImportError:
        return "setuptools is not installed (pip install 'setuptools>=68')"
    version = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
    if version < (68, 0):
        return f"setuptools {setuptools.__version__} is older than pyproject's >= 68"
    if version < (70, 1):
        try:
            import wheel  # noqa: F401
        except ImportError:
            return "neither setuptools >= 70.1 nor the wheel package: cannot build a wheel"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_wheel_build_reason() is not None, reason=str(_wheel_build_reason()))
def test_wheel_ships_every_recipe_and_profile(tmp_path):
    """`pip wheel` of the project holds recipes/ and sweeps/ as ablate/recipes, ablate/sweeps:
    every YAML file of the repository's folders, one copy each."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for d in ("ablate", "trainer", "recipes", "sweeps"):
        shutil.copytree(ROOT / d, src / d, ignore=ignore)
    for f in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / f, src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("ablate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind in ("recipes", "sweeps"):
        want = {f"ablate/{kind}/{p.relative_to(ROOT / kind).as_posix()}"
                for p in (ROOT / kind).rglob("*.yaml")}
        assert want and want <= names, sorted(want - names)
    assert "ablate/recipes/scalerl.yaml" in names and "ablate/sweeps/slurm_gpu.yaml" in names
    assert "ablate/cli/__init__.py" in names and "trainer/rundir.py" in names


@pytest.mark.slow
@needs_script
def test_study_in_own_folder_uses_shipped_recipe_and_profile(tmp_path):
    for base in ("scalerl.yaml", "scalerl"):  # a bare name is NAME.yaml, as `profile:` is
        (tmp_path / "study.yaml").write_text(
            f"name: mine\nbase: {base}\naxes:\n  loss.aggregation: [sample, token]\n"
            "profile: slurm_gpu\n")
        r = ablate("sweep", "study.yaml", "--dry-run", "--json", cwd=tmp_path)
        assert r.returncode == 0, (base, r.stderr[-2000:])
        runs = json.loads(r.stdout)
        assert len(runs) == 2
        assert {x["config"]["model"]["name_or_path"] for x in runs} == {"Qwen/Qwen3-8B"}
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


@pytest.mark.slow
@needs_script
def test_user_files_of_those_names_win(tmp_path):
    """A scalerl.yaml next to the study, and a sweeps/local.yaml, are the ones used (each is
    broken here, so the error says which file was read)."""
    (tmp_path / "scalerl.yaml").write_text("rollout:\n  prompts_per_stepp: 8\n")
    (tmp_path / "study.yaml").write_text("name: mine\nbase: scalerl.yaml\n")
    err = one_error_line(ablate("sweep", "study.yaml", "--dry-run", cwd=tmp_path))
    assert err.startswith("error: scalerl.yaml:2:") and "prompts_per_step" in err, err

    (tmp_path / "scalerl.yaml").unlink()
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "local.yaml").write_text("local:\n  max_parallel: 0\n")
    (tmp_path / "study.yaml").write_text("name: mine\nbase: proxy.yaml\nprofile: local\n")
    err = one_error_line(ablate("sweep", "study.yaml", "--dry-run", cwd=tmp_path))
    assert "sweeps/local.yaml:2" in err and "max_parallel" in err, err


@pytest.mark.slow
@needs_script
def test_a_missing_name_lists_each_place_once(tmp_path):
    sub = tmp_path / "studies"
    sub.mkdir()
    (sub / "study.yaml").write_text("name: mine\nbase: scalerl.yml\n")
    err = one_error_line(ablate("sweep", "studies/study.yaml", "--dry-run", cwd=tmp_path))
    places = looked_for(err)
    assert len(places) == len(set(places)) == 3, places  # the study's folder, here, shipped
    assert places[0] == "studies/scalerl.yml" and places[1] == "scalerl.yml", places
    assert "shipped: proxy.yaml, scalerl.yaml" in err, err  # the names that would do

    (sub / "study.yaml").write_text("name: mine\nbase: scalerl.yaml\nprofile: slurm_gpus\n")
    err = one_error_line(ablate("sweep", "studies/study.yaml", "--dry-run", cwd=tmp_path))
    places = looked_for(err)
    # sweeps/ of the study's folder, of its parent (= of here: said once), then the shipped one
    assert places[:2] == ["studies/sweeps/slurm_gpus.yaml", "sweeps/slurm_gpus.yaml"], places
    assert len(places) == len(set(places)) == 3 and places[2].endswith("sweeps/slurm_gpus.yaml")
    assert "profile 'slurm_gpus' not found" in err and "shipped: local, ray, slurm, slurm_gpu" in err


@pytest.mark.slow
@needs_script
def test_a_fit_column_typo_is_refused_before_submitting(tmp_path):
    body = "name: mine\nbase: proxy.yaml\naxes:\n  loss.aggregation: [sample, token]\n"
    (tmp_path / "study.yaml").write_text(body + "fit: {x: flops, y: eval/pass_rat}\n")
    err = one_error_line(ablate("sweep", "study.yaml", "--executor", "local", cwd=tmp_path))
    assert err.startswith("error: study.yaml:5: fit.y 'eval/pass_rat'"), err
    assert "did you mean 'eval/pass_rate'" in err
    assert not (tmp_path / "results").exists()  # nothing submitted, nothing written

    (tmp_path / "study.yaml").write_text(body + "fit: {x: compute}\n")
    err = one_error_line(ablate("sweep", "study.yaml", "--dry-run", cwd=tmp_path))
    assert "fit.x 'compute' is not a compute column" in err and "gpu_hours, flops" in err


@pytest.mark.slow
@needs_script
def test_init_writes_a_starter_study_that_sweeps(tmp_path):
    r = ablate("init", "proj", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    study = tmp_path / "proj" / "study.yaml"
    assert f"wrote {Path('proj') / 'study.yaml'}" in r.stdout
    assert "next: ablate sweep proj/study.yaml --dry-run" in r.stdout
    text = study.read_text()
    assert "name: proj\n" in text and "base: proxy.yaml" in text and "profile: local" in text
    r = ablate("init", "proj", cwd=tmp_path)  # never overwrites
    assert "already exists" in one_error_line(r) and study.read_text() == text
    r = ablate("sweep", "study.yaml", "--dry-run", "--json", cwd=tmp_path / "proj")
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(json.loads(r.stdout)) == 4  # 2 temperatures x 2 seeds


def tiny(folder: Path, name: str, axes: str, steps: int) -> Path:
    """A study of the user's, on the shipped proxy recipe and local profile."""
    path = folder / "study.yaml"
    path.write_text(f"name: {name}\nbase: proxy.yaml\noverrides:\n{TINY_OVERRIDES.format(every=2)}"
                    f"axes:\n{axes}\nseeds: [0]\nbudget: {{steps: {steps}}}\nprofile: local\n"
                    "fit: {x: gpu_hours, y: eval/pass_rate}\n")
    return path


@pytest.mark.slow
@needs_script
def test_wait_exits_nonzero_when_runs_fail_and_status_says_why(tmp_path):
    """The ppo run of the stand-in trainer (tests/_progress_entry.py) fails at step 3."""
    tiny(tmp_path, "pv", "  loss.type: [cispo, ppo]\n", 4)
    r = ablate("sweep", "study.yaml", "--wait", "--entry", "_progress_entry:run", cwd=tmp_path,
               timeout=300)
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    assert "1 of 2 runs failed; first: loss.type=ppo seed 0: RuntimeError: boom at step 3" \
        in r.stdout, r.stdout
    assert "ablate sweep study.yaml` retries them" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr

    r = ablate("status", str(Path("results") / "pv"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("failed ")]
    assert lines == ["failed loss.type=ppo seed 0: RuntimeError: boom at step 3"], r.stdout
    assert all(len(x) <= 100 for x in r.stdout.splitlines())
    r = ablate("status", str(Path("results") / "pv"), "--json", cwd=tmp_path)
    by_state = {x["name"]: (x["state"], x["error"]) for x in json.loads(r.stdout)}
    assert by_state == {"loss.type=cispo": ("done", None),
                        "loss.type=ppo": ("failed", "RuntimeError: boom at step 3")}


@pytest.mark.slow
@needs_script
def test_ctrl_c_stops_the_waiting_not_the_runs(tmp_path):
    """Ctrl-C as a terminal sends it (SIGINT to the whole foreground process group): one line
    (what goes on, how to follow and stop it), exit 130, no traceback; the local jobs keep
    training, and the `kill` the line gives stops them."""
    from ablate.studies.status import study_states

    tiny(tmp_path, "slow", "  loss.type: [cispo, ppo]\n", 200)
    env = user_env()
    # Files, not pipes: the background jobs inherit them and keep a pipe open after ablate ends.
    with open(tmp_path / "out", "w") as fo, open(tmp_path / "err", "w") as fe, \
            sigint_as_in_a_terminal():
        proc = subprocess.Popen([ABLATE, "sweep", "study.yaml", "--wait", "--entry",
                                 "_slow_entry:run"], cwd=tmp_path, env=env, stdout=fo,
                                stderr=fe, start_new_session=True)  # a group: the "terminal"
    study_dir = tmp_path / "results" / "slow"
    try:
        wait_until(lambda: (study_dir / "variants.json").is_file() and all(
            s.state == "running" and (s.step or 0) >= 2 for s in study_states(study_dir)),
            timeout=120, what="both runs training")
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert proc.returncode == 130, (out, err[-3000:])
    assert "Traceback" not in out + err, err[-3000:]
    tail = err[err.index("stopped waiting"):].splitlines()  # wrapped at the width (100 piped)
    assert all(len(x) <= 100 for x in tail), tail
    line = " ".join(tail)
    assert "2 runs go on in the background (2 running, 0 queued)" in line, line
    assert "ablate status" in line, line
    pids = re.search(r"stop them: kill -INT ([\d ]+);", line).group(1).split()
    assert len(pids) == 2, line
    steps = {s.run_id: s.step for s in study_states(study_dir)}
    after = wait_until(  # the runs go on training
        lambda: (lambda st: st if all(s.state == "running" and s.step > steps[s.run_id]
                                      for s in st) else None)(study_states(study_dir)),
        60, 0.2, "both runs to train past where the sweep stopped waiting")
    assert len(after) == 2, after
    for pid in pids:  # what the line says stops them: at a step boundary, resumable
        os.kill(int(pid), signal.SIGINT)
    states = wait_until(lambda: (lambda st: st if not any(s.state in ("queued", "running")
                                                          for s in st) else None)(
        study_states(study_dir)), timeout=60, what="the killed jobs to end")
    assert {s.state for s in states} == {"stopped"}, states  # not failed, no attempt used
    assert all(s.attempts == 0 and s.step >= 2 for s in states), states
    r = ablate("status", str(study_dir), cwd=tmp_path)
    assert "stopped at a checkpoint" in r.stdout and "resumes them" in r.stdout, r
    r = ablate("sweep", "study.yaml", "--dry-run", cwd=tmp_path)  # the next sweep resumes them
    assert r.returncode == 0 and "skipped" not in r.stdout.lower(), r


@pytest.mark.slow
@needs_script
def test_status_cuts_a_long_cause_to_one_line(tmp_path):
    """A multi-line error longer than 100 columns: one line of at most 100, ending in ...;
    `--json` keeps the whole error."""
    tiny(tmp_path, "long", "  loss.type: [ppo]\n", 2)
    r = ablate("sweep", "study.yaml", "--executor", "debug", "--entry", "_slow_entry:long_error",
               cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    r = ablate("status", "results/long", cwd=tmp_path)
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("failed ")]
    assert line.startswith("failed loss.type=ppo seed 0: RuntimeError: CUDA out of memory.")
    assert len(line) <= 100 and line.endswith("..."), line
    (run,) = json.loads(ablate("status", "results/long", "--json", cwd=tmp_path).stdout)
    assert run["error"].endswith("(detail) \nsecond line")


@pytest.mark.slow
@needs_script
def test_run_takes_a_shipped_recipe_by_name_and_says_where_it_looked(tmp_path):
    """`ablate run NAME.yaml` from a user's folder: a missing name is one line listing where it
    looked and what ships, exit 2, nothing written; a shipped recipe's name resolves (checked
    with a user file of that name, which must win: its typo is what gets reported)."""
    r = ablate("run", "nosuch.yaml", "--out", "r", cwd=tmp_path)
    err = one_error_line(r)
    assert "nosuch.yaml" in looked_for(err)[0] and "shipped: " in err and "proxy.yaml" in err
    assert not (tmp_path / "r").exists()
    (tmp_path / "proxy.yaml").write_text("optim:\n  lrr: 1e-4\n")
    err = one_error_line(ablate("run", "proxy.yaml", "--out", "r", cwd=tmp_path))
    assert "lrr" in err and "proxy.yaml:2" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@needs_script
def test_sweep_takes_a_shipped_study_by_name(tmp_path):
    """`ablate sweep loss_agg.yaml` (or `recipes/loss_agg.yaml`, as the README writes it) from a
    user's folder finds the shipped study; a missing name is one line listing where it looked
    and the shipped studies (not the base recipes), exit 2, nothing written."""
    for name in ("loss_agg.yaml", "recipes/loss_agg.yaml", "loss_agg"):
        r = ablate("sweep", name, "--dry-run", "--json", "--executor", "local", cwd=tmp_path)
        assert r.returncode == 0, (name, r.stderr)
        assert len(json.loads(r.stdout)) == 6, r.stdout[:500]  # 3 aggregations x 2 seeds
    err = one_error_line(ablate("sweep", "nosuch.yaml", "--dry-run", cwd=tmp_path))
    assert "nosuch.yaml" in looked_for(err)[0] and "loss_agg.yaml" in err, err
    assert "scalerl.yaml" not in err.split("shipped: ")[1], err  # a base recipe, not a study
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@needs_script
def test_dry_run_on_a_100_column_terminal_folds_its_prose_not_its_rows(tmp_path):
    """On a terminal (a pty here, COLUMNS=100) the plan's long lines fold at words under their
    indent instead of being cut mid-word by the terminal; each run's table row stays one line.
    Piped with no COLUMNS, the width is 100 (ablate/cli/width.py, issue 52): the same rows,
    nothing over 100."""
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen([ABLATE, "sweep", "loss_agg.yaml", "--profile", "slurm_gpu",
                          "--dry-run"], cwd=tmp_path, env=user_env(), stdout=slave,
                         stderr=subprocess.PIPE, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    assert p.wait(timeout=120) == 0, p.stderr.read()
    lines = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r", "").split("\n")
    rows = [x for x in lines if re.match(r"[0-9a-f]{12}  ", x)]
    assert len(rows) == 6 and all(x.rstrip().endswith(("=sample", "=prompt", "=token"))
                                  for x in rows), rows
    prose = [x for x in lines if x not in rows]
    assert all(len(x) <= 100 for x in prose), [x for x in prose if len(x) > 100]
    assert any(x.startswith("      ") for x in prose)  # a folded plan line under its indent
    env = {k: v for k, v in user_env().items() if k != "COLUMNS"}
    piped = subprocess.run([ABLATE, "sweep", "loss_agg.yaml", "--profile", "slurm_gpu",
                            "--dry-run"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=env)
    assert max(len(x) for x in piped.stdout.splitlines()) <= 100, piped.stdout
    assert [x for x in piped.stdout.splitlines() if re.match(r"[0-9a-f]{12}  ", x)] == \
        [x.rstrip() for x in rows]
    assert list(tmp_path.iterdir()) == []
