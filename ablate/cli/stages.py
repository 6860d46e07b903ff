"""What `ablate sweep` prints for an adaptive study (one with `stages:`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from rich.console import Console


def adaptive_sweep(study: Path, *, executor: Optional[str], profile: Optional[str],
                   results: Path, entry: str, wait: bool, as_json: bool) -> None:
    from ablate.studies.stages import budget_text, run_adaptive

    rep = run_adaptive(study, executor=executor, profile=profile, results=results, entry=entry,
                       wait=wait, show=not as_json)
    if as_json:
        print(json.dumps(rep.to_json()))
        return
    con = Console()
    n = len(rep.budgets)
    shown = min(rep.stage, n - 1)
    con.print(f"[bold]{Path(rep.study_dir).name}[/]: adaptive, stage {shown + 1} of {n} "
              f"(budget {budget_text(rep.budgets[shown])}), submitted {len(rep.submitted)} via "
              f"{rep.executor}, skipped {len(rep.skipped)}  ->  {rep.study_dir}")
    for d in rep.decisions:
        for v, why in d["stopped"].items():
            con.print(f"  stopped {v}: {why}", style="yellow")
    if rep.finished:
        from ablate.analysis.answer import study_answer

        # The sentence says what happened: who reached the final budget, who was stopped
        # where, and a lone survivor left unscaled (scale_winner: false).
        con.print(f"finished: {study_answer(rep.study_dir)}", markup=False, highlight=False)
        con.print(f"details: ablate compare {rep.study_dir}", markup=False, highlight=False)
    elif not wait:
        con.print(f"follow with: ablate status {rep.study_dir}; rerun this `ablate sweep` "
                  "when the stage's runs end to fit, stop and promote")
