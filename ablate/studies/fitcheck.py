"""A study's `fit:` columns, checked against what its trainer logs before anything is submitted.

`ablate compare` fits `fit.y` against `fit.x` from each run's log after training; a typo there
(`y: eval/pass_rat`, `x: compute`) used to be accepted by `ablate sweep` and fail only when the
runs had spent their compute. So `sweep` (and `sweep --dry-run`) refuse it up front, by the
rule of the study's trainer (its adapter's `check_fit`, ablate/adapters):

  * ablate's own trainer: the columns are declared once in trainer/rundir.py; `x` must be one
    of COMPUTE_COLUMNS and `y` one of SCORE_COLUMNS (a rate in [0, 1], what the sigmoid fits).
  * other trainers: their column names are theirs and are only known once they log, so only
    what can be known beforehand is checked: `x: compute` needs `trainer.step_cost` (ablate
    computes it as step x step_cost), and TRL's `eval_*` columns need TRL to evaluate
    (`eval_strategy` other than `no`) when ablate's own entry runs it. A wrong name otherwise
    shows at `ablate compare` (which names the columns the log has).
"""

from __future__ import annotations

from typing import Any

from ablate.adapters import adapter_for
from ablate.studies.design import LoadedStudy


def check_fit_columns(loaded: LoadedStudy) -> None:
    """Refuse (one line, file:line, the valid names) a `fit:` column the trainer never logs."""
    study, doc = loaded.study, loaded.doc
    data = doc.data if isinstance(doc.data, dict) else {}
    fit_doc = data.get("fit") if isinstance(data.get("fit"), dict) else {}

    def where(key: str) -> str:
        return doc.where(("fit", key)) if key in fit_doc else doc.where(("fit",))

    # the `fit:` keys as written: what ablate/adapters/curve.py's fit_defaults reads for
    # another trainer (x is "compute" only when written or implied by step_cost)
    fit: dict[str, Any] = {k: v for k, v in fit_doc.items() if k in ("x", "y")}
    adapter_for(study.trainer).check_fit(loaded, fit, where)
