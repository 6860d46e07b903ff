"""What TRL, verl and command adapters share: a trainer run as a program with its own keys.

A subclass says what is its own: `kind`, `default_log` (where it writes its curve),
`check_key` (raise InputError, one line with the nearest valid key, for a key not the
trainer's; each adapter module's SCALERL table refuses ablate's keys with the trainer's own),
`check_overrides` (a whole variant, e.g. composed with the trainer's config), `steps_key` (the
key `budget.steps` sets) and `argv` (the command that trains a variant into a run dir); and
`from_spec`. This class does the rest the `Adapter` protocol asks, the same for every such
trainer: a study of flat keys (ablate/adapters/study.py), its runs in a child process
(runner.py), its curve from the trainer's log (curve.py). No memory or time plan: that trainer
sizes itself.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ablate.adapters.base import TrainerSpec
from ablate.adapters.study import ForeignConfig, foreign_run_id, load_foreign
from ablate.errors import InputError
from ablate.yamlio import YamlDoc


class ForeignAdapter:
    kind: str
    default_log: str
    reads_own_log = True
    memory_plan = None
    time_plan = None
    topology = None
    split_lines = None
    split_json = None
    gpu_reason = None
    replan = None
    time_range = None

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "ForeignAdapter":
        raise NotImplementedError

    def check_key(self, key: str, where: str) -> None:
        raise NotImplementedError

    def check_overrides(self, overrides: dict[str, Any], where: str) -> None:
        raise NotImplementedError

    def steps_key(self) -> str:
        raise NotImplementedError

    def argv(self, overrides: dict[str, Any], seed: int, run_dir: Path, resume: bool) -> list[str]:
        raise NotImplementedError

    def run_overrides(self, cfg: ForeignConfig) -> dict[str, Any]:
        """The variant's overrides plus the budget's steps as the trainer's own key (max_steps,
        trainer.total_training_steps, ...): what the trainer is run with."""
        over = dict(cfg.overrides)
        if cfg.budget is not None and cfg.budget.steps is not None:
            over[self.steps_key()] = cfg.budget.steps
        return over

    def load_base(self, doc: YamlDoc, study: Any, overrides: Sequence[str]
                  ) -> tuple[dict[str, Any], dict, list[Path]]:
        return load_foreign(self, doc, study, overrides), {}, []

    def check_values(self, loaded: Any) -> None:
        """Nothing before the runs: each point's overrides are checked whole (`point_runs`)."""

    def point_runs(self, loaded: Any, assign: list) -> Iterator[tuple[int, ForeignConfig]]:
        """The point's overrides, checked by the adapter once (with the first seed: the
        trainer's steps key included, which verl composes)."""
        s = loaded.study
        over = {**loaded.base_tree, **{".".join(k): v for k, v, _ in assign}}
        for seed in s.seeds:
            cfg = ForeignConfig(trainer=s.trainer, seed=seed, overrides=over, budget=s.budget)
            if seed == s.seeds[0]:
                where = assign[-1][2] if assign else str(loaded.path)
                self.check_overrides(self.run_overrides(cfg), where)
            yield seed, cfg

    def run_id(self, config: ForeignConfig) -> str:
        return foreign_run_id(config)

    def problems(self, config: Any, shape: Any) -> list[str]:
        """None: the trainer's keys were checked when the study was expanded."""
        return []

    def command(self, config: ForeignConfig, run_dir: Path) -> str:
        """The command a run executes (its first attempt), rendered without writing anything:
        an adapter that writes a file of the overrides (a `command` trainer with
        override_style json) writes it into a temporary folder, whose name is then replaced by
        the run dir's."""
        with tempfile.TemporaryDirectory() as tmp:
            argv = self.argv(self.run_overrides(config), config.seed, Path(tmp), False)
            return shlex.join(w.replace(tmp, str(run_dir)) for w in argv)

    def check_fit(self, loaded: Any, fit: dict[str, Any], where: Callable[[str], str]) -> None:
        """Column names are the trainer's, known only once it logs; what can be known before:
        `x: compute` (as ablate/adapters/curve.py's fit_defaults reads `fit:`: written, or
        implied by step_cost) needs `trainer.step_cost` (ablate computes step x step_cost)."""
        if fit.get("x") == "compute" and loaded.study.trainer.step_cost is None:
            raise InputError(f"{where('x')}: fit.x 'compute' is step x trainer.step_cost, and "
                             "this study sets no trainer.step_cost; set it, or name a column "
                             f"the {self.kind} log has (e.g. a token count)")

    @staticmethod
    def job_config(raw: dict[str, Any]) -> dict[str, Any]:
        """The parsed config.yaml as it is: the runner checks it (a bad one fails the run)."""
        return raw

    @classmethod
    def run(cls, config: dict[str, Any], run_dir: Path, entry: Callable[[Any, Path], Any]) -> None:
        """In a child process, followed by ablate/adapters/runner.py (`entry` is the built-in
        trainer's: not used). Imported here: the runner reads curves with pandas (0.8 s), which
        `ablate status` (it imports the executors) should not pay for."""
        from ablate.adapters.runner import run_foreign

        run_foreign(config, run_dir, cls)

    @classmethod
    def curve(cls, run_dir: Path, fit: dict[str, Any]) -> bytes:
        from ablate.adapters.curve import curve_rows  # the log readers: pandas, when needed

        return curve_rows(run_dir, fit, cls.default_log)

    @staticmethod
    def fit_defaults(trainer: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
        from ablate.adapters.curve import fit_defaults

        return fit_defaults(trainer, fit)
