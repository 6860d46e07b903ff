"""Which columns of a log or a table are its score and its compute, and which column a name
given with --x/--y/--by means: one rule for every reader and for plain tables (issue 51).

Names are matched with `.` and `/` as one separator: a JSONL log's nested
`{"eval": {"math": {"accuracy": ...}}}` reads as `eval/math/accuracy`, and `--y
eval.math.accuracy` finds it (as `--y eval/math/accuracy` finds a CSV's `eval.math.accuracy`).

Score (y), first rule that matches wins; two matches for one rule are ambiguous (--y picks):
    score                                        ablate's long table
    eval/pass_rate                               ablate
    val-core/<data source>/acc/mean@N            verl (the accuracy mean@N of its validation)
    val/test_score/<data source>                 older verl
    eval/rewards/<*acc*|*correct*|*pass*>/mean   TRL (an accuracy reward function, eval split)
    val-core/<data source>/reward/mean@N         verl without an accuracy variable
    eval/reward                                  TRL (the weighted reward sum, eval split)
    eval/accuracy, eval/acc, eval/pass@1         common names
    pass_rate, accuracy, acc, pass@1             the same without a split's prefix
then the only column named eval/..., val/... or test/... (TRL/HF write "eval_x" in JSON logs and
"eval/x" in TensorBoard; both match). A log of one metric: that is the score.

Compute (x), first rule that matches wins: compute (ablate's long table), gpu_hours, flops
(ablate), total_flos (HF), tokens (num_tokens, tokens_seen, consumed_tokens: TRL and others,
cumulative), samples (num_samples, samples_seen, consumed_samples); a cumulative count beats
the step, which A and B do not depend on but C_mid and budgets do. A per-step count (verl's
perf/total_num_tokens) is summed by the reader (ablate/readers/pick.py).
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np

from ablate.errors import InputError
from ablate.readers.common import is_band
from trainer.rundir import FLOPS, GPU_HOURS, PASS_RATE, STEP

TABLE_X, TABLE_Y = "compute", "score"  # ablate's long table (variant, seed, compute, score)
SCORE_RULES = [re.escape(TABLE_Y), re.escape(PASS_RATE), r"val-core/.+/acc/mean@\d+",
               r"val/test_score/.+", r"eval[/_]rewards/[^/]*(?:acc|correct|pass)[^/]*/mean",
               r"val-core/.+/reward/mean@\d+", r"eval[/_]reward",
               r"eval[/_](?:accuracy|acc|pass@1|pass_rate)",
               r"(?:pass_rate|accuracy|acc|pass@1)"]
_TRAIN = r"(?:train/)?"
CUMULATIVE = [re.escape(TABLE_X), re.escape(GPU_HOURS), re.escape(FLOPS), _TRAIN + "total_flos",
              _TRAIN + r"(?:num_tokens|tokens|tokens_seen|consumed_tokens)",
              _TRAIN + r"(?:num_samples|samples|samples_seen|consumed_samples)"]
PER_STEP = [r"perf/total_num_tokens"]
STEP_AXES = {STEP, "Step", "_step", "global_step", "trainer/global_step", "train/global_step"}
_LOSS = re.compile(r"(?:^|[/_.])(?:loss|nll|perplexity|ppl|kl)(?:$|[/_.])", re.IGNORECASE)


def key(name: str) -> str:
    """The name with `.` and `/` as one separator (how names are compared)."""
    return str(name).replace(".", "/")


def resolve(given: str, cols: Sequence[str]) -> Optional[str]:
    """The column `given` names: itself, else the one column equal to it with `.` and `/` as
    one separator; None when there is none (or two: `a.b` and `a/b` both present)."""
    if given in cols:
        return given
    hits = [c for c in cols if key(c) == key(given)]
    return hits[0] if len(hits) == 1 else None


def matches(rules: list[str], cols: Sequence[str]) -> list[str]:
    """The columns the first rule that matches any column matches (in `cols`' order)."""
    for rule in rules:
        hits = [c for c in cols if re.fullmatch(rule, key(c))]
        if hits:
            return hits
    return []


def listing(cols: Sequence[str]) -> str:
    more = f" (+{len(cols) - 25} more)" if len(cols) > 25 else ""
    return ", ".join(map(str, cols[:25])) + more


def find_score(cols: Sequence[str], src: str, what: str = "metric") -> tuple[str, str]:
    """(the score column, how it was found) among `cols`; InputError naming the --y to pass
    when none or several fit."""
    # `ablate watch`'s band is never the score, nor a loss (it falls; A is a ceiling a score
    # rises to): taking the only column when it is a loss fitted a wrong curve in silence
    losses = [c for c in cols if is_loss(c)]
    cols = [c for c in cols if not is_band(c) and c not in losses]
    if len(cols) == 1:
        return cols[0], f"the only {what}"
    hits = matches(SCORE_RULES, cols)
    if not hits:  # one evaluation column that stands out is the score
        hits = [c for c in cols if re.match(r"(?:eval|val|test)[/_]", key(c))]
        if len(hits) == 1:
            return hits[0], f"the only evaluation {what}"
    if len(hits) > 1:
        raise InputError(f"{src}: several score {what}s fit; pass one of "
                         + " or ".join(f"--y {h}" for h in hits[:6]))
    if not hits:
        if losses and not cols:
            raise InputError(f"{src}: no score {what}: {listing(losses)} reads as a loss "
                             "(lower is better), not a score that rises to a ceiling; the "
                             "sigmoid fits an evaluation score (a pass rate or accuracy)")
        lost = (f" (a loss is never taken as the score: {listing(losses[:3])})"
                if losses else "")
        raise InputError(f"{src}: no score {what} recognised (e.g. score, eval/pass_rate, "
                         f"accuracy, verl val-core/<src>/acc/mean@N, TRL eval/reward); pass "
                         f"--y NAME with one of: {listing(cols)}{lost}")
    return hits[0], "auto-detected"


def find_compute(cols: Sequence[str]) -> Optional[str]:
    """The cumulative compute column among `cols` by the rules above, or None."""
    hits = matches(CUMULATIVE, cols)
    return hits[0] if hits else None


def given(name: Optional[str], cols: Sequence[str], src: str, flag: str,
          valid: str = "", what: str = "column") -> Optional[str]:
    """The column --x/--y/--by NAME means (`resolve`), or an InputError listing the columns
    (a log's "metrics")."""
    if name is None:
        return None
    got = resolve(name, cols)
    if got is None:
        raise InputError(f"{src}: no {what} {name!r} for {flag}; {what}s: {listing(cols)}"
                         + (f" ({valid})" if valid else ""))
    return got


def table_axes(cols: Sequence[str], src: str, *, x: Optional[str], y: Optional[str],
               by: Sequence[str], skip: Sequence[str]) -> tuple[str, str, list[str], list[str]]:
    """A plain table's compute and score columns and its --by columns, as the file names them:
    the given names resolved (`.` and `/` alike), the others found by the rules a log's are
    (its step as the last resort); and the line that says what was found ([] when the table
    uses ablate's own `compute` and `score`)."""
    cols = [str(c) for c in cols]
    by_cols = [given(b, cols, src, "--by") or b for b in by]
    free = [c for c in cols if c not in (*skip, *by_cols, "seed")]
    how_y = how_x = "as given"
    y_col = given(y, cols, src, "--y")
    if y_col is None:
        counts = {*matches(CUMULATIVE, free), *(c for c in free if c in STEP_AXES)}
        named = matches(SCORE_RULES, free)  # a score's name first, then the only other column
        y_col, how_y = ((named[0], "auto-detected") if len(named) == 1 else
                        find_score([c for c in free if c not in counts], src, "column"))
        how_y = how_y.replace("the only column", "the only column but compute and step")
    x_col = given(x, cols, src, "--x", "or --step-cost C for compute = step x C")
    if x_col is None:
        x_col, how_x = find_compute([c for c in free if c != y_col]), "auto-detected"
    if x_col is None:
        step = next((c for c in free if c in STEP_AXES), None)
        if step is None:
            raise InputError(f"{src}: no compute column recognised (compute, gpu_hours, flops, "
                             f"tokens, samples, or a step); pass --x NAME with one of: "
                             f"{listing(free)}")
        x_col, how_x = step, ("no compute column found; pass --step-cost C (compute per "
                              "step) to convert; A and B do not depend on it")
    if x_col == y_col:
        raise InputError(f"{src}: --x and --y are the same column {x_col!r}")
    said = [] if (x_col, y_col) == (TABLE_X, TABLE_Y) else [
        f"{src}: score = {y_col!r} ({how_y}), compute = {x_col!r} ({how_x})"]
    return x_col, y_col, by_cols, said


def is_loss(name: str) -> bool:
    """A name that reads as a loss (or another quantity where lower is better)."""
    return bool(_LOSS.search(str(name)))


def scale_hint(name: str, scores: np.ndarray) -> str:
    """What to pass for scores outside [0, 1]: for a loss, a score instead (a loss falls; the
    sigmoid's A is the ceiling a score rises to); else the --y-range that holds them."""
    if is_loss(name):
        return (f"{name!r} reads as a loss (lower is better), not a score that rises to a "
                "ceiling: pass --y with an evaluation score (a pass rate or accuracy)")
    lo, hi = float(np.min(scores)), float(np.max(scores))
    if lo >= -1 and hi <= 1:
        return "for another scale pass --y-range -1 1 (rewards in [-1, 1])"
    if lo >= 0 and hi <= 100:
        return "for another scale pass --y-range 0 100 (percent)"
    return f"for another scale pass --y-range LO HI (the score's scale; these run from {lo:g} to {hi:g})"
