"""The built-in trainer's adapter object (`ADAPTERS["ablate"]`): what every trainer kind
answers (load, expand, check, run, curve), and the capabilities only this trainer has (its
memory and time plans, topology, split lines, GPU check), each a call into trainer/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

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

    def split_lines(self, config: TrainConfig, shape: Any) -> list[str]:
        """The dry run's line on the run's split of GPUs between engines and ranks."""
        from ablate.adapters.builtin.split_text import split_lines

        return split_lines(config, shape)

    def split_json(self, config: TrainConfig, shape: Any) -> Optional[dict[str, Any]]:
        """`resources.split` of `sweep --dry-run --json` (None: no layout to choose)."""
        from ablate.adapters.builtin.split_text import split_json

        return split_json(config, shape)

    def gpu_reason(self, config: TrainConfig, cores: int, time_min: float) -> Optional[str]:
        """Why the run needs GPUs on jobs of `cores` CPU cores and `time_min` minutes."""
        from ablate.adapters.builtin.gpu_check import gpu_reason

        return gpu_reason(config, cores, time_min)

    def replan(self, config: TrainConfig, shape: Any, limits: Any, docs: list[dict],
               same_variant: bool, configs: list) -> Optional[tuple[Any, str, str]]:
        """A run not started, re-planned on the rates other runs measured (replan.py)."""
        from ablate.adapters.builtin.replan import replan

        return replan(config, shape, limits, docs, same_variant, configs)

    def time_range(self, config: TrainConfig, shape: Any, limits: Any) -> Any:
        """The time plan's range from its uncertain constants (trainer/plan/time_plan.py)."""
        from trainer.plan.time_plan import plan_range

        return plan_range(config, shape, limits)

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


def recipe_keys() -> frozenset[str]:
    """A recipe's top-level keys (TrainConfig's sections): how a recipe handed to `ablate
    sweep` in place of a study is told apart."""
    return frozenset(TrainConfig.model_fields)


def train(config: TrainConfig, run_dir: Path, where: str) -> None:
    """`ablate run`: train `config` into `run_dir` in this process (trainer.run, which imports
    the loop and torch only now). Proxy settings that cannot reach their warm-up target are the
    user's to fix: one line naming `where` (InputError)."""
    import trainer
    from trainer.models.proxy import WarmupError

    try:
        trainer.run(config, run_dir)
    except WarmupError as e:
        raise InputError(f"{where}: {e}") from None
