"""Engine `deepspeed` (marker `deepspeed`): 2 processes, gloo on CPU, ZeRO stages 0-3.

Each case launches two real ranks of tests/_deepspeed_script.py with the environment `srun`
gives its tasks (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_JOB_NODELIST), so
trainer/dist/groups.py's Slurm path sets up torch.distributed; the trainer's own loop then takes
real RL steps on a warmed tiny proxy. Checks: both ranks finish with identical weights (ZeRO's
partitioned updates are gathered back consistently), the weights moved, and every stage ends
where stage 0 does (ZeRO only partitions state; it must not change the math).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _multirank_util import ROOT, launch_ranks, session_cache, warm_proxy

pytestmark = pytest.mark.deepspeed

try:
    from trainer.engine_deepspeed import import_deepspeed

    import_deepspeed()
except Exception as e:  # noqa: BLE001 - any import failure means: cannot test here
    print(f"SKIP deepspeed: cannot import deepspeed ({type(e).__name__}: {e})", file=sys.stderr)
    pytest.skip(f"deepspeed cannot be imported: {e}", allow_module_level=True)


def launch(stage: int, dtype: str, work: Path, cache: Path) -> list[dict]:
    launch_ranks(ROOT / "tests" / "_deepspeed_script.py", [str(stage), dtype, str(work)], cache)
    return [json.loads((work / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def cache() -> Path:
    """Warm the proxy once (both ranks and all stages load it from this cache)."""
    path = session_cache()
    warm_proxy(path, "__import__('_deepspeed_script').config(0, 'fp32')")
    return path


@pytest.fixture(scope="module")
def runs(cache, tmp_path_factory) -> dict:
    return {}


def _run(runs: dict, key: tuple, cache: Path, tmp_path_factory) -> list[dict]:
    if key not in runs:
        runs[key] = launch(key[0], key[1], tmp_path_factory.mktemp(f"ds{key[0]}{key[1]}"), cache)
    return runs[key]


def _max_abs_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_two_ranks_real_trainer_steps(stage, runs, cache, tmp_path_factory):
    r0, r1 = _run(runs, (stage, "fp32"), cache, tmp_path_factory)
    for r in (r0, r1):
        assert r["world"] == 2 and r["backend"] == "gloo"
        assert r["status"] == "done" and r["step"] == 3
        assert r["metrics_steps"][0] == 0 and r["metrics_steps"][-1] == 3
        assert r["lr"] and all(abs(lr - 3e-3) < 1e-12 for lr in r["lr"])  # constant, no warm-up
    assert _max_abs_diff(r0["params"], r1["params"]) == 0.0  # ranks hold the same model
    assert r0["broadcast"] == r1["broadcast"] == "from-rank-0"
    if stage > 0:
        base = _run(runs, (0, "fp32"), cache, tmp_path_factory)[0]["params"]
        # Partitioning optimizer state / gradients / parameters must not change the update.
        assert _max_abs_diff(base, r0["params"]) < 1e-4


def test_zero_updates_the_weights(runs, cache, tmp_path_factory, monkeypatch):
    """Guard against a vacuous match: training really moved the weights from the proxy."""
    import torch
    from transformers import AutoModelForCausalLM

    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    from _deepspeed_script import config

    monkeypatch.setenv("ABLATE_CACHE", str(cache))
    from trainer.policy import proxy_path

    init = AutoModelForCausalLM.from_pretrained(proxy_path(config(0, "fp32")), dtype=torch.float32)
    start = torch.cat([p.detach().reshape(-1) for p in init.parameters()]).tolist()
    after = _run(runs, (3, "fp32"), cache, tmp_path_factory)[0]["params"]
    assert _max_abs_diff(start, after) > 1e-4


def test_zero3_bf16_with_fp32_head(runs, cache, tmp_path_factory):
    r0, r1 = _run(runs, (3, "bf16"), cache, tmp_path_factory)
    assert r0["status"] == r1["status"] == "done"
    assert _max_abs_diff(r0["params"], r1["params"]) == 0.0


def test_deepspeed_imported_without_its_autotuners_mlflow_and_mlflow_still_imports():
    """trainer.engine_deepspeed.import_deepspeed skips deepspeed's optional `import mlflow`
    (~1.9 s of every rank's start when mlflow is installed) and leaves mlflow importable for
    logging.backends [mlflow]. In a fresh process: this one already imported deepspeed."""
    code = ("import sys; from trainer.engine_deepspeed import import_deepspeed; import_deepspeed()\n"
            "from deepspeed.autotuning import autotuner\n"
            "print(autotuner.has_mlflow, 'mlflow' in sys.modules)\n"
            "try:\n    import mlflow; print(mlflow.__name__)\n"
            "except ImportError: print('no mlflow installed')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "DS_ACCELERATOR": "cpu"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    first, after = r.stdout.splitlines()[-2:]
    assert first == "False False", r.stdout  # autotuner without mlflow, and none left loaded
    assert after in ("mlflow", "no mlflow installed"), r.stdout
