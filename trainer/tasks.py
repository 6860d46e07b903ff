"""Tasks: where prompts come from and how a completion is verified (+1/-1 rewards).

`task.name` picks one registered builder: "arithmetic" (built-in, the fast CPU proxy),
"reasoning_gym:<task>" (any reasoning-gym task, procedurally generated offline, scored by the
task's own scorer) or "math" (a local JSONL/parquet with problem/answer, scored by
math-verify). Training and held-out eval problems are disjoint by construction. `score` is a
call's verdicts (decoded completions through the task's verifier): the one path the rewards,
the eval and the proxy's warm-up all take.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from trainer.counted import count
from trainer.registry import Registry

if TYPE_CHECKING:  # types only: the config reads TASKS for the task kinds it accepts
    from trainer.config import TaskConfig


@dataclass
class Problem:
    prompt: str
    answer: str
    difficulty: float = 0.0  # for the easy_to_hard curriculum (higher = harder)
    meta: Any = field(default=None, repr=False)
    unanswerable: bool = False  # calibration control (task.unanswerable_fraction)


@dataclass
class Task:
    train: list[Problem]
    eval: list[Problem]
    score: Callable[[Problem, str], bool]  # completion text (without EOS) -> correct?
    # Warm-up target for the proxy's supervised phase (the answer as the model should write it).
    target: Callable[[Problem], str] = lambda p: p.answer


TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task")


def build_task(cfg: TaskConfig, eval_split: str = "heldout") -> Task:
    """The task, its RL pool cut to `cfg.rl_pool`; with eval_split "train" its eval list is
    (copies of) that pool, so the calibration cap marks what eval scores, not what RL trains on."""
    kind = cfg.name.split(":", 1)[0]
    task = TASKS.get(kind)(cfg)
    if cfg.rl_pool:
        task = replace(task, train=task.train[: cfg.rl_pool])
    if eval_split == "train":
        task = replace(task, eval=[replace(p) for p in task.train])
    return cap_task(task, cfg.unanswerable_fraction) if cfg.unanswerable_fraction else task


def decode(tok, completions: Sequence[Sequence[int]]) -> list[str]:
    """Completion ids -> answer text (EOS and other special tokens dropped)."""
    eos = tok.eos_token_id
    return tok.batch_decode([[t for t in c if t != eos] for c in completions],
                            skip_special_tokens=True)


def score(task: Task, problems: Sequence[Problem], tok, completions: Sequence[Sequence[int]],
          n: int) -> list[bool]:
    """Verdict of each completion; completions are prompt-major, `n` per problem."""
    return [task.score(problems[i // n], text)
            for i, text in enumerate(decode(tok, completions))]


def unanswerable(i: int, fraction: float) -> bool:
    """Is problem i of a list one of the `fraction` scored wrong? Evenly spread: exactly
    floor(n * fraction) of any first n problems, whatever n (eval may use a prefix)."""
    return int((i + 1) * fraction) > int(i * fraction)


def cap_task(task: Task, fraction: float) -> Task:
    """The calibration control: a share of the held-out problems no answer can solve. The list
    is already in random order, so the share is independent of difficulty, and training is
    untouched (same data, same rewards, same trajectory as the uncapped run of the same seed):
    the capped variant's true ceiling is (1 - fraction) x the uncapped one's."""
    marked = [replace(p, unanswerable=unanswerable(i, fraction)) for i, p in enumerate(task.eval)]
    inner = task.score
    return replace(task, eval=marked, score=lambda p, text: not p.unanswerable and inner(p, text))


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
        answer = str(val)
        if cfg.reversed_answer:
            answer = "-" * (val < 0) + str(abs(val))[::-1]
        probs.append(Problem(f"{a:0{cfg.digits}d}{op}{b:0{cfg.digits}d}=", answer,
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


# Appended to every math problem: the instruction reasoning models are trained with, so the
# final answer lands in \boxed{} where math-verify looks first.
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
# Column names used by common math datasets (first match wins).
PROBLEM_COLUMNS = ("problem", "question", "prompt", "query")
ANSWER_COLUMNS = ("answer", "final_answer", "ground_truth", "solution")


@TASKS.register("math")
def math_task(cfg: TaskConfig) -> Task:
    """Verifiable math problems scored by math-verify: `task.path` is a local .jsonl / .json /
    .parquet / .csv file or folder, or an HF dataset id `org/name[:split]` (read through the
    HF cache; see trainer/models/hub.py). Problems and answers come from the first present column of
    PROBLEM_COLUMNS / ANSWER_COLUMNS. The held-out set is carved from the same table (the
    paper: 1,000 held-out prompts of its training set), disjoint from training."""
    from trainer.models.hub import load_table  # pandas is slow to import: only a math task pays

    if not cfg.path:
        raise ValueError("task.path: task 'math' needs a local .jsonl/.parquet file or an HF "
                         "dataset id (org/name[:split])")
    df = load_table(cfg.path)
    pcol = next((c for c in PROBLEM_COLUMNS if c in df.columns), None)
    acol = next((c for c in ANSWER_COLUMNS if c in df.columns), None)
    if pcol is None or acol is None:
        raise ValueError(f"task.path {cfg.path}: need a problem column ({'/'.join(PROBLEM_COLUMNS)}) "
                         f"and an answer column ({'/'.join(ANSWER_COLUMNS)}); found "
                         f"{sorted(map(str, df.columns))}")
    rows = df.dropna(subset=[pcol, acol]).drop_duplicates(pcol)
    rows = rows.sample(frac=1.0, random_state=cfg.data_seed)
    probs = [Problem(f"{r[pcol]}\n{MATH_INSTRUCTION}", str(r[acol]),
                     difficulty=_difficulty(r.get("level"), r[pcol]))
             for _, r in rows.iterrows()]
    if len(probs) < 2:
        raise ValueError(f"task.path {cfg.path}: {count(len(probs), 'usable problem')}; need at "
                         "least 2 (training and held-out sets are disjoint)")
    n_eval = min(cfg.num_eval_prompts, max(1, len(probs) // 5))
    return Task(train=probs[n_eval: n_eval + cfg.num_train_prompts], eval=probs[:n_eval],
                score=_math_verify)


def _difficulty(level: Any, problem: str) -> float:
    """For the easy_to_hard curriculum: the dataset's level ("Level 3" or 3) if it has one,
    else the problem's length."""
    try:
        return float(str(level).split()[-1])
    except (ValueError, IndexError):
        return float(len(str(problem)))


def _math_verify(p: Problem, text: str) -> bool:
    from math_verify import parse, verify

    # Timeouts use signals, which only work on the main thread; rewards are scored there.
    # A reasoning model's thinking holds candidate answers: only the text after it counts.
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    # A bare answer is wrapped as LaTeX; a worked solution (answer column `solution`) is parsed
    # as written, so math-verify takes its \boxed{} answer.
    # The eval worker scores in its own thread (trainer/generation/eval_service.py), where
    # math-verify's signal.alarm timeouts cannot be set (math_verify/utils.py `timeout`
    # raises there): off the main thread it runs without them, as its error message advises.
    t = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(p.answer if "\\boxed" in p.answer else f"${p.answer}$", parsing_timeout=t)
    pred = parse(text, parsing_timeout=t)
    return bool(pred) and bool(verify(gold, pred, timeout_seconds=t))
