"""`ablate tune`: Optuna trials are real (tiny) trainer runs; reruns continue the search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _study_util import ROOT, cli

SPACE = f"""name: tt
base: {ROOT / 'recipes' / 'proxy.yaml'}
overrides:
  model.proxy: {{hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, warmup_target: null}}
  task: {{num_train_prompts: 64, num_eval_prompts: 16}}
  rollout: {{prompts_per_step: 4, generations_per_prompt: 2}}
  eval: {{every_steps: 2, num_prompts: 16, samples_per_prompt: 1}}
  engine.threads: 1
budget: {{steps: 2}}
params:
  optim.lr: {{low: 1.0e-4, high: 1.0e-2, log: true}}
  loss.aggregation: {{choices: [sample, token]}}
objective: {{metric: eval/pass_rate, reduce: last}}
n_trials: 2
"""


@pytest.mark.slow
def test_tune_runs_trials_and_continues(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    r = cli("tune", str(space), "--results", str(tmp_path / "res"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert [t["state"] for t in out["trials"]] == ["COMPLETE", "COMPLETE"]
    for t in out["trials"]:
        run = Path(t["run_dir"])
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert t["value"] == rows[-1]["eval/pass_rate"] and rows[-1]["step"] == 2
        assert 1e-4 <= t["params"]["optim.lr"] <= 1e-2
        assert t["params"]["loss.aggregation"] in ("sample", "token")
    assert out["best"]["value"] == max(t["value"] for t in out["trials"])
    r = cli("tune", str(space), "--results", str(tmp_path / "res"), "--trials", "3", "--json")
    again = json.loads(r.stdout)
    assert len(again["trials"]) == 3 and again["trials"][:2] == out["trials"]


def test_tune_bad_space_exits_2(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.replace("optim.lr: {low: 1.0e-4", "optim.lrate: {low: 1.0e-4"))
    r = cli("tune", str(space), "--results", str(tmp_path / "res"))
    assert r.returncode == 2 and "did you mean 'optim.lr'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "res").exists()
    space.write_text(SPACE.replace("low: 1.0e-4, high: 1.0e-2", "low: 1.0e-2, high: 1.0e-4"))
    r = cli("tune", str(space), "--results", str(tmp_path / "res"))
    assert r.returncode == 2 and "low < high" in r.stderr and "space.yaml:11" in r.stderr


def test_a_run_without_metrics_fails_its_trial_not_the_search(tmp_path):
    # A run that ended (e.g. diverged) before writing metrics.jsonl fails its trial with a
    # RuntimeError, which optuna catches; a FileNotFoundError would end the whole `ablate tune`.
    import pytest

    from ablate.studies.tune import Objective, _score

    with pytest.raises(RuntimeError, match="no metrics.jsonl to score"):
        _score(tmp_path, Objective())
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "eval/pass_rate": 0.25}\n')
    assert _score(tmp_path, Objective()) == 0.25
