"""Paper-scale studies on real (local) models and data, offline: `sweep --override`, the math
dataset loader, one-line errors for missing weights/data, and the chunked LM head.

The study run here is recipes/loss_agg.yaml as shipped (Qwen3-8B + Polaris-53K at 16k
tokens), pointed with `--override` at a tiny Llama saved to disk (character tokenizer with a
chat template, like a real instruct checkpoint) and a local JSONL of math problems, with the
sizes shrunk so the real trainer loop runs a few steps on a CPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _study_util import ROOT, cli, cli_json, metric_steps, states

CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'][0] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<a><think>{% endif %}")


def tiny_chat_model(folder: Path) -> Path:
    """A 1-layer Llama + character tokenizer with a chat template, saved like a checkpoint."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.models.tokenizer import char_tokenizer

    tok = char_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def math_jsonl(path: Path, n: int = 40) -> Path:
    rows = [{"problem": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(n) for b in (3,)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# Shrink the 16k-token, 768-completion, ZeRO-3 recipe to a few CPU seconds per run.
SMALL = ["rollout.prompts_per_step=2", "rollout.generations_per_prompt=2",
         "rollout.max_new_tokens=6", "length.thinking_budget=4", "length.answer_budget=3",
         "task.num_eval_prompts=2", "eval.num_prompts=2", "eval.samples_per_prompt=2",
         "eval.every_steps=1", "checkpoint.every_steps=1", "budget.steps=2",
         "engine.type=torch", "engine.zero_stage=0", "engine.device=cpu", "engine.threads=1",
         "rollout.backend=hf"]  # the paper recipe generates with vLLM; this venv has none


def overrides(*pairs: str) -> list[str]:
    return [x for p in pairs for x in ("--override", p)]


@pytest.mark.slow
def test_paper_study_runs_on_local_model_and_data_through_the_loop(tmp_path):
    model = tiny_chat_model(tmp_path / "model")
    data = math_jsonl(tmp_path / "math.jsonl")
    results = tmp_path / "results"
    # Relative paths (as a user types them) become absolute: jobs may start elsewhere.
    args = ["sweep", str(ROOT / "recipes" / "loss_agg.yaml"), "--executor", "debug",
            "--results", str(results),
            *overrides(f"model.name_or_path={model}",
                       f"task.path={os.path.relpath(data, ROOT)}",  # the CLI runs in ROOT
                       *SMALL)]
    out = cli_json(*args, timeout=600)
    sdir = results / "loss_agg"
    st = states(sdir)
    assert len(out["submitted"]) == 6 and len(st) == 6  # 3 aggregations x 2 seeds
    assert all(s["state"] == "done" and s["step"] == 2 for s in st.values()), st
    aggs = set()
    for rid in out["submitted"]:
        import yaml

        cfg = yaml.safe_load((sdir / rid / "config.yaml").read_text())
        assert cfg["model"]["name_or_path"] == str(model) and cfg["task"]["path"] == str(data)
        # The paper recipe's choices survive: only what was overridden changed.
        assert cfg["model"]["chat_template"] and cfg["length"]["control"] == "interrupt"
        assert cfg["loss"]["type"] == "cispo" and cfg["off_policy"]["mode"] == "pipeline"
        aggs.add(cfg["loss"]["aggregation"])
        assert metric_steps(sdir / rid) == [0, 1, 2]
        last = json.loads((sdir / rid / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["samples"] == 2 * 2 * 2 and last["flops"] > 0  # 2 steps x 2 prompts x G=2
    assert aggs == {"sample", "prompt", "token"}
    recorded = (sdir / "study.yaml").read_text()
    assert f"#   model.name_or_path={model}" in recorded and "name: loss_agg" in recorded
    # The same sweep again: nothing to do (same overrides -> same run ids).
    assert cli_json(*args)["submitted"] == []


@pytest.mark.parametrize("bad, says", [
    ("model.name_or_path", "expected KEY=VALUE"),
    ("loss.aggregaton=token", "did you mean 'loss.aggregation'"),
    ("loss.aggregation=median", "loss.aggregation"),
])
def test_bad_override_is_a_one_line_error_and_writes_nothing(tmp_path, bad, says):
    r = cli("sweep", str(ROOT / "recipes" / "loss_agg.yaml"), "--executor", "local",
            "--results", str(tmp_path / "res"), "--override", bad)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "--override" in line
    assert says in line
    assert not (tmp_path / "res").exists()


def test_dry_run_shows_overridden_values(tmp_path):
    data = math_jsonl(tmp_path / "m.jsonl")
    # --executor local: where `sinfo` answers, no profile is Slurm's GPU-less defaults, on
    # which the 8B study is refused (ablate/studies/gpu_need.py)
    out = cli_json("sweep", str(ROOT / "recipes" / "precision.yaml"), "--dry-run",
                   "--executor", "local",
                   "--override", f"task.path={data}", "--override", "rollout.max_new_tokens=512")
    assert {v["config"]["task"]["path"] for v in out} == {str(data)}
    assert {v["config"]["rollout"]["max_new_tokens"] for v in out} == {512}
    default = cli_json("sweep", str(ROOT / "recipes" / "precision.yaml"), "--dry-run",
                       "--executor", "local")
    assert {v["run_id"] for v in out}.isdisjoint(v["run_id"] for v in default)


def _fail_message(tmp_path: Path, **over) -> dict:
    """Run the trainer on the tiny local model with `over` applied; return status.json."""
    import trainer
    from trainer.config import TrainConfig

    base = {"model": {"name_or_path": str(tiny_chat_model(tmp_path / "model"))},
            "task": {"name": "math", "path": str(math_jsonl(tmp_path / "m.jsonl"))},
            "engine": {"device": "cpu"}, "budget": {"steps": 1}}
    for section, values in over.items():
        base[section] = {**base.get(section, {}), **values}
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError) as err:
        trainer.run(TrainConfig.model_validate(base), run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and str(err.value) in status["error"]
    return status


@pytest.mark.parametrize("over, names, how", [
    ({"model": {"name_or_path": "no-such-org/no-such-model"}}, "no-such-org/no-such-model",
     "hf download no-such-org/no-such-model"),
    ({"model": {"name_or_path": "/no/such/dir"}}, "/no/such/dir", "save_pretrained"),
    ({"task": {"path": "no-such-org/no-such-data"}}, "no-such-org/no-such-data",
     "datasets.load_dataset('no-such-org/no-such-data', split='train')"),
    ({"task": {"path": "/no/such/problems.jsonl"}}, "/no/such/problems.jsonl", "does not exist"),
])
def test_missing_weights_or_data_fail_at_start_with_one_line(tmp_path, monkeypatch, over, names, how):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a compute node without network
    status = _fail_message(tmp_path, **over)
    line = status["error"]
    assert line.startswith("AssetUnavailable: ") and len(line.splitlines()) == 1, line
    assert names in line and how in line, line
    assert status["step"] == 0


def test_math_loader_reads_folders_and_common_column_names(tmp_path):
    import pandas as pd

    from trainer.config import TaskConfig
    from trainer.tasks import MATH_INSTRUCTION, build_task

    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"question": f"Compute {a}*7.", "solution": f"So it is \\boxed{{{7 * a}}}.",
             "level": f"Level {a % 5 + 1}"} for a in range(30)]
    pd.DataFrame(rows[:15]).to_parquet(folder / "a.parquet")
    pd.DataFrame(rows[15:]).to_json(folder / "b.jsonl", orient="records", lines=True)
    t = build_task(TaskConfig(name="math", path=str(folder), num_train_prompts=100,
                              num_eval_prompts=5))
    assert len(t.train) == 25 and len(t.eval) == 5
    assert not {p.prompt for p in t.train} & {p.prompt for p in t.eval}
    p = t.train[0]
    assert p.prompt.endswith(MATH_INSTRUCTION) and 1 <= p.difficulty <= 5
    gold = p.answer.split("boxed{")[1].split("}")[0]
    assert t.score(p, f"<think>maybe {int(gold) + 1}</think> The answer is $\\boxed{{{gold}}}$")
    assert not t.score(p, f"<think>it is {gold}</think> so \\boxed{{{int(gold) + 1}}}")
    with pytest.raises(ValueError, match="need a problem column"):
        pd.DataFrame({"text": ["x", "y"]}).to_csv(tmp_path / "bad.csv")
        build_task(TaskConfig(name="math", path=str(tmp_path / "bad.csv")))


def test_chunked_head_equals_one_pass(monkeypatch):
    """Above MAX_LOGITS_PER_CHUNK the head runs in checkpointed chunks: same log-probs,
    entropies and gradients as one pass over the full logits."""
    import trainer.models.logprobs as tm
    from trainer.models.precision import LMHead

    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)  # the head's weights too: the check is the same on every run
    lin = torch.nn.Linear(16, 50, bias=False)
    head = LMHead(lin, True)
    hidden = torch.randn(3, 7, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (3, 7), generator=g)

    def run():
        logp, ent = tm.head_logprobs(head, hidden, targets, 0.7, True)
        grads = torch.autograd.grad((logp * torch.arange(7.0)).sum(), [hidden, lin.weight])
        return logp.detach(), ent, grads

    one = run()
    monkeypatch.setattr(tm, "MAX_LOGITS_PER_CHUNK", 50 * 4)  # 4 token rows per chunk: 6 chunks
    chunked = run()
    # Not bitwise: a matmul over fewer rows may block its sums differently (seen on 17 of 30
    # random heads); the chunking itself must change nothing beyond rounding.
    assert torch.allclose(one[0], chunked[0], rtol=1e-6, atol=1e-6)
    assert torch.allclose(one[1], chunked[1], rtol=1e-6, atol=1e-6)
    for a, b in zip(one[2], chunked[2]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
