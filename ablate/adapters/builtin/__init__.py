"""The built-in trainer (`trainer/`, kind `ablate`) as an adapter, like TRL, verl and command.

Its keys are TrainConfig paths (config_paths.py), its base a chain of recipes with each value's
file:line (provenance.py), its study loaded and expanded by study.py. It is the one trainer with
the memory and time planning capabilities (trainer/plan/), and it trains in the job's own
process (the job's entry point, `trainer:run`), so it has no command to show. Its curve is the
run dir's metrics.jsonl (trainer/rundir.py), which gather's cache watches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ablate.adapters.base import TrainerSpec
from ablate.adapters.builtin.study import check_values, load_base, point_runs, run_id_of
from ablate.errors import InputError
from ablate.study_record import FitSpec
from ablate.validation import suggest
from ablate.yamlio import YamlDoc
from trainer import rundir
from trainer.config import TrainConfig


class BuiltinAdapter:
    kind = "ablate"
    reads_own_log = False
    command = None  # trains in the job's process: no command line to show

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "BuiltinAdapter":
        return cls()

    def load_base(self, doc: YamlDoc, study: Any, overrides: Sequence[str]
                  ) -> tuple[dict[str, Any], dict, list[Path]]:
        return load_base(doc, study, overrides)

    def check_values(self, loaded: Any) -> None:
        check_values(loaded)

    def point_runs(self, loaded: Any, assign: list) -> Iterator[tuple[int, TrainConfig]]:
        return point_runs(loaded, assign)

    def run_id(self, config: TrainConfig) -> str:
        return run_id_of(config.model_dump(mode="json"))

    def problems(self, config: TrainConfig, shape: Any) -> list[str]:
        """trainer/validate.py: the rules the trainer's own start-up applies."""
        from trainer.validate import problems

        return problems(config, shape)

    def memory_plan(self, config: TrainConfig, shape: Any) -> Any:
        """GiB per training and generation GPU by term (trainer/plan/memory.py)."""
        from trainer.plan.memory import plan

        return plan(config, shape)

    def time_plan(self, config: TrainConfig, shape: Any, limits: Any) -> Any:
        """A step, an eval, the budget's wall time and jobs (trainer/plan/time_plan.py)."""
        from trainer.plan.time_plan import plan_time

        return plan_time(config, shape, limits)

    def topology(self, config: TrainConfig, shape: Any) -> Any:
        """Where the run's ranks and engines go on the job (trainer/plan/topology.py)."""
        from trainer.plan.topology import topology

        return topology(config, shape)

    def check_fit(self, loaded: Any, fit: dict[str, Any], where: Callable[[str], str]) -> None:
        """The columns are declared once in trainer/rundir.py: `x` one of COMPUTE_COLUMNS, `y`
        one of SCORE_COLUMNS (a rate in [0, 1], what the sigmoid fits)."""
        x, y = loaded.study.fit.x, loaded.study.fit.y
        if x not in rundir.COMPUTE_COLUMNS:
            raise InputError(f"{where('x')}: fit.x '{x}' is not a compute column ablate's "
                             f"trainer logs {suggest(x, list(rundir.COMPUTE_COLUMNS))}")
        if y not in rundir.SCORE_COLUMNS:
            raise InputError(f"{where('y')}: fit.y '{y}' is not a score column ablate's trainer "
                             f"logs {suggest(y, list(rundir.SCORE_COLUMNS))}; the sigmoid fits "
                             "a pass rate in [0, 1]")

    @staticmethod
    def job_config(raw: dict[str, Any]) -> TrainConfig:
        return TrainConfig.model_validate(raw)

    @staticmethod
    def run(config: TrainConfig, run_dir: Path, entry: Callable[[Any, Path], Any]) -> None:
        entry(config, run_dir)

    @staticmethod
    def curve(run_dir: Path, fit: dict[str, Any]) -> bytes:
        return rundir.complete_metrics_bytes(run_dir)

    @staticmethod
    def fit_defaults(trainer: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
        # its columns are the study schema's defaults (FitSpec: gpu_hours, eval/pass_rate)
        return {**FitSpec().model_dump(exclude_none=True), **fit}
