"""A study's `fit:` columns, checked against what its trainer logs before anything is submitted.

`ablate compare` fits `fit.y` against `fit.x` from each run's log after training; a typo there
(`y: eval/pass_rat`, `x: compute`) used to be accepted by `ablate sweep` and fail only when the
runs had spent their compute. So `sweep` (and `sweep --dry-run`) refuse it up front:

  * ablate's own trainer: the columns are declared once in trainer/rundir.py; `x` must be one
    of COMPUTE_COLUMNS and `y` one of SCORE_COLUMNS (a rate in [0, 1], what the sigmoid fits).
  * other trainers (ablate/adapters/): their column names are theirs and are only known once
    they log, so only what can be known beforehand is checked: `x: compute` needs
    `trainer.step_cost` (ablate computes it as step x step_cost), and TRL's `eval_*` columns
    need TRL to evaluate (`eval_strategy` other than `no`) when ablate's own entry runs it. A
    wrong name otherwise shows at `ablate compare` (which names the columns the log has).
"""

from __future__ import annotations

from typing import Any

from ablate.errors import InputError
from ablate.studies.design import LoadedStudy
from ablate.validation import suggest
from trainer.rundir import COMPUTE_COLUMNS, SCORE_COLUMNS


def check_fit_columns(loaded: LoadedStudy) -> None:
    """Refuse (one line, file:line, the valid names) a `fit:` column the trainer never logs."""
    study, doc = loaded.study, loaded.doc
    data = doc.data if isinstance(doc.data, dict) else {}
    fit_doc = data.get("fit") if isinstance(data.get("fit"), dict) else {}

    def where(key: str) -> str:
        return doc.where(("fit", key)) if key in fit_doc else doc.where(("fit",))

    if study.trainer.kind == "ablate":
        if study.fit.x not in COMPUTE_COLUMNS:
            raise InputError(f"{where('x')}: fit.x '{study.fit.x}' is not a compute column "
                             f"ablate's trainer logs {suggest(study.fit.x, list(COMPUTE_COLUMNS))}")
        if study.fit.y not in SCORE_COLUMNS:
            raise InputError(f"{where('y')}: fit.y '{study.fit.y}' is not a score column "
                             f"ablate's trainer logs {suggest(study.fit.y, list(SCORE_COLUMNS))}"
                             "; the sigmoid fits a pass rate in [0, 1]")
        return
    # What ablate/adapters/curve.py's fit_defaults makes of it (not imported: it pulls in the
    # log readers): x is "compute" only when written or implied by step_cost.
    fit: dict[str, Any] = {k: v for k, v in fit_doc.items() if k in ("x", "y")}
    if fit.get("x") == "compute" and study.trainer.step_cost is None:
        raise InputError(f"{where('x')}: fit.x 'compute' is step x trainer.step_cost, and this "
                         "study sets no trainer.step_cost; set it, or name a column the "
                         f"{study.trainer.kind} log has (e.g. a token count)")
    if study.trainer.kind == "trl" and not study.trainer.command:
        _check_trl_eval(loaded, str(fit.get("y", "")), where("y"))


def _check_trl_eval(loaded: LoadedStudy, y: str, where: str) -> None:
    """TRL logs `eval_*` columns only when it evaluates: GRPOConfig's eval_strategy defaults
    to "no" (transformers TrainingArguments.eval_strategy), so such a fit would find nothing."""
    if not y.startswith("eval_"):
        return
    tree = loaded.base_tree if isinstance(loaded.base_tree, dict) else {}
    values = [tree.get("eval_strategy", "no"), *loaded.study.axes.get("eval_strategy", [])]
    if all(str(v) == "no" for v in values):
        raise InputError(f"{where}: fit.y '{y}' is an eval column, but TRL never evaluates in "
                         "this study (eval_strategy is 'no'); set overrides.eval_strategy: steps "
                         "and eval_steps, or fit a train column (e.g. reward)")
