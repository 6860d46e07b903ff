"""Tasks: where prompts come from and how a completion is verified (+1/-1 rewards).

`task.name` picks one registered builder: "arithmetic" (built-in, the fast CPU proxy),
"reasoning_gym:<task>" (any reasoning-gym task, procedurally generated offline, scored by the
task's own scorer) or "math" (a local JSONL/parquet with problem/answer, scored by
math-verify). Training and held-out eval problems are disjoint by construction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainer.config import TaskConfig
from trainer.registry import Registry


@dataclass
class Problem:
    prompt: str
    answer: str
    difficulty: float = 0.0  # for the easy_to_hard curriculum (higher = harder)
    meta: Any = field(default=None, repr=False)


@dataclass
class Task:
    train: list[Problem]
    eval: list[Problem]
    score: Callable[[Problem, str], bool]  # completion text (without EOS) -> correct?
    # Warm-up target for the proxy's supervised phase (the answer as the model should write it).
    target: Callable[[Problem], str] = lambda p: p.answer


TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task")


def build_task(cfg: TaskConfig) -> Task:
    kind = cfg.name.split(":", 1)[0]
    return TASKS.get(kind)(cfg)


@TASKS.register("arithmetic")
def arithmetic(cfg: TaskConfig) -> Task:
    """Fixed-width "07+35=" problems (fixed width keeps prompts unpadded: no position issues)."""
    rng = random.Random(cfg.data_seed)
    n = cfg.num_train_prompts + cfg.num_eval_prompts
    hi = 10 ** cfg.digits
    space = hi * hi * len(cfg.operators)
    if n > space:
        raise ValueError(f"task: {n} prompts requested but only {space} distinct "
                         f"{cfg.digits}-digit problems exist; lower num_train/eval_prompts")
    seen: set[tuple[int, int, str]] = set()
    probs: list[Problem] = []
    while len(probs) < n:
        a, b, op = rng.randrange(hi), rng.randrange(hi), rng.choice(cfg.operators)
        if (a, b, op) in seen:
            continue
        seen.add((a, b, op))
        val = a + b if op == "+" else a - b if op == "-" else a * b
        probs.append(Problem(f"{a:0{cfg.digits}d}{op}{b:0{cfg.digits}d}=", str(val),
                             difficulty=_carries(a, b) if op == "+" else len(str(abs(val)))))
    return Task(train=probs[: cfg.num_train_prompts], eval=probs[cfg.num_train_prompts:],
                score=lambda p, text: text.strip() == p.answer)


def _carries(a: int, b: int) -> int:
    c = n = 0
    while a or b:
        c = (a % 10 + b % 10 + c) // 10
        n += c
        a, b = a // 10, b // 10
    return n


@TASKS.register("reasoning_gym")
def reasoning_gym_task(cfg: TaskConfig) -> Task:
    """Any reasoning-gym task by name: `reasoning_gym:basic_arithmetic`."""
    import reasoning_gym

    _, _, name = cfg.name.partition(":")
    if not name:
        raise ValueError("task.name: write 'reasoning_gym:<task>', e.g. reasoning_gym:basic_arithmetic")
    train_ds = reasoning_gym.create_dataset(name, size=cfg.num_train_prompts, seed=cfg.data_seed)
    # Eval from another seed, minus anything that also occurs in training (disjoint).
    eval_ds = reasoning_gym.create_dataset(name, size=cfg.num_eval_prompts * 2,
                                           seed=cfg.data_seed + 1_000_003)

    def prob(e: dict, ds) -> Problem:
        return Problem(f"{e['question']}\nAnswer: ", str(e["answer"]),
                       difficulty=float(len(str(e["answer"]))), meta=(ds, e))

    train = [prob(e, train_ds) for e in train_ds]
    seen = {p.prompt for p in train}
    ev = [p for p in (prob(e, eval_ds) for e in eval_ds) if p.prompt not in seen]
    return Task(train=train, eval=ev[: cfg.num_eval_prompts],
                score=lambda p, text: p.meta[0].score_answer(answer=text.strip(), entry=p.meta[1]) >= 1.0)


@TASKS.register("math")
def math_task(cfg: TaskConfig) -> Task:
    """Local JSONL/parquet with `problem` and `answer` columns, scored by math-verify."""
    import pandas as pd

    if not cfg.path:
        raise ValueError("task.path: 'math' needs a local .jsonl/.parquet file or an HF dataset name")
    path = Path(cfg.path)
    if path.suffix in (".parquet", ".jsonl", ".json"):
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=True)
    else:  # an HF dataset name ("org/name[:split]"), where a network exists; never in tests
        import datasets

        name, _, split = cfg.path.partition(":")
        df = datasets.load_dataset(name, split=split or "train").to_pandas()
    missing = {"problem", "answer"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; need problem, answer")
    rows = df.drop_duplicates("problem").sample(frac=1.0, random_state=cfg.data_seed)
    probs = [Problem(f"{r.problem}\nAnswer: ", str(r.answer),
                     difficulty=float(getattr(r, "level", len(str(r.problem))) or 0))
             for r in rows.itertuples()]
    n_eval = min(cfg.num_eval_prompts, max(1, len(probs) // 5))
    return Task(train=probs[n_eval: n_eval + cfg.num_train_prompts], eval=probs[:n_eval],
                score=_math_verify)


def _math_verify(p: Problem, text: str) -> bool:
    from math_verify import parse, verify

    # Timeouts use signals, which only work on the main thread; rewards are scored there.
    gold, pred = parse(f"${p.answer}$"), parse(text)
    return bool(pred) and bool(verify(gold, pred))
