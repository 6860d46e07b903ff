"""`python -m ablate.adapters.trl_entry --key value ...`: one TRL GRPO run from flags.

Flags are GRPOConfig's fields (parsed by TRL's own HfArgumentParser, so TRL checks types and
values) plus what to train on: a local model folder, a JSONL dataset of {"prompt", "answer"}
rows, and a reward (`match` = share of the answer's characters the completion gets right,
position by position, or `module:function` with TRL's reward signature). Every `on_log` row is
appended to `<output_dir>/log.jsonl` with its step, which `ablate status` and `compare` read.
On SIGTERM it saves a checkpoint at the next step end and exits 0 (`SaveOnSignal`).
"""

from __future__ import annotations

import importlib
import json
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from transformers import TrainerCallback


@dataclass
class EntryArgs:
    model_name_or_path: str = field(metadata={"help": "Local model folder (config + tokenizer)."})
    dataset: str = field(metadata={"help": "JSONL file, one {\"prompt\", \"answer\"} per line."})
    reward: str = field(default="match", metadata={"help": "`match` or module:function."})
    eval_fraction: float = field(default=0.2, metadata={"help": "Share of rows held out for eval."})


def match_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """Share of the answer's characters the completion has at the same position."""
    return [sum(a == b for a, b in zip(c, ans)) / max(len(ans), 1)
            for c, ans in zip(completions, answer)]


def load_reward(spec: str) -> Callable:
    if spec == "match":
        return match_reward
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


class JsonlLog(TrainerCallback):
    """Append each logged row (train and eval) to a JSONL file, with TRL's global step."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            row = {"step": state.global_step, **{k: v for k, v in logs.items()
                                                  if isinstance(v, (int, float))}}
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


class SaveOnSignal(TrainerCallback):
    """SIGTERM (ablate's default `trainer.stop_signal`: preemption, a gpu_hours budget spent)
    asks for a checkpoint at the next step end and a clean exit, so a requeued run resumes
    from that step rather than TRL's last periodic checkpoint. The handler only sets a flag:
    the save has to happen between optimizer steps."""

    def __init__(self, signums: tuple[int, ...] = (signal.SIGTERM,)) -> None:
        self.requested = False
        for s in signums:
            signal.signal(s, self._request)

    def _request(self, signum, frame) -> None:
        self.requested = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control


def datasets(path: str, eval_fraction: float, seed: int):
    from datasets import Dataset

    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    random.Random(seed).shuffle(rows)
    n_eval = int(len(rows) * eval_fraction)
    train = Dataset.from_list(rows[n_eval:])
    return train, (Dataset.from_list(rows[:n_eval]) if n_eval else None)


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser
    from trl import GRPOConfig, GRPOTrainer

    entry, config = HfArgumentParser((EntryArgs, GRPOConfig)).parse_args_into_dataclasses(argv)
    tok = AutoTokenizer.from_pretrained(entry.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(entry.model_name_or_path)
    train, evals = datasets(entry.dataset, entry.eval_fraction, config.data_seed or 0)
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    trainer = GRPOTrainer(model=model, reward_funcs=load_reward(entry.reward), args=config,
                          train_dataset=train, eval_dataset=evals, processing_class=tok,
                          callbacks=[JsonlLog(Path(config.output_dir) / "log.jsonl"),
                                     SaveOnSignal()])
    resume: Any = config.resume_from_checkpoint
    if str(resume).lower() == "true":  # `--resume_from_checkpoint true`: TRL's latest checkpoint
        resume = True
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
