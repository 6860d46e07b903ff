#!/usr/bin/env bash
# Fixed-seed trainer runs whose metrics.jsonl must not change under a refactor that changes no
# behaviour: run the cases with the code of checkout TREE into OUT/<case>/, then compare two
# such folders with compare_metrics.py (time columns aside).
#
#   git clone -q . /tmp/base && git -C /tmp/base checkout <commit>     # the code before
#   benchmarks/behaviour/run_cases.sh /tmp/base /tmp/before
#   benchmarks/behaviour/run_cases.sh . /tmp/after
#   python benchmarks/behaviour/compare_metrics.py /tmp/before /tmp/after
#
# Cases (cases/*.yaml, each on cases/proxy_base.yaml; ~2-4 min each on a loaded 2-core machine):
#   quickstart_cold        the quickstart's cold variant, shorter: PipelineRL-8, data timing
#   ppo_off_policy_token   ppo_off_policy k=4, ppo loss, token aggregation, per-prompt
#                          advantages, pass-rate curriculum, overlong penalty, micro-batches
#   two_ranks_gspo         2 ranks (gloo), gspo, sample aggregation, easy_to_hard, pipeline k=2
# usage: run_cases.sh TREE OUT [case ...]
set -euo pipefail
TREE=$(cd "$1" && pwd)
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
CASES=${*:-quickstart_cold ppo_off_policy_token two_ranks_gspo}
export PYTHONPATH=$TREE OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export ABLATE_CACHE=${ABLATE_CACHE:-/tmp/ablate-behaviour-cache}  # the warmed proxy, shared
mkdir -p "$OUT"
for case in $CASES; do
  rm -rf "${OUT:?}/$case"
  cfg=$HERE/cases/$case.yaml
  if [[ $case == two_ranks_* ]]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    pids=()
    for r in 0 1; do
      (cd "$TREE" && RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        python3 -m ablate run "$cfg" --out "$OUT/$case" --json > "$OUT/$case.rank$r.log" 2>&1) &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
  else
    (cd "$TREE" && python3 -m ablate run "$cfg" --out "$OUT/$case" --json > "$OUT/$case.log" 2>&1)
  fi
  echo "$case: $(wc -l < "$OUT/$case/metrics.jsonl") metrics rows"
done
