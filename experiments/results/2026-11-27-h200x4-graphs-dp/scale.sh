#!/usr/bin/env bash
# scale.sh OUT ROUNDS STEPS (from the repository root on the GPU machine): interleaved rounds of nam56r-small-fast at 1, 2, 4 GPUs, graphs on.
set -uo pipefail
OUT=$1; ROUNDS=$2; STEPS=$3
source scripts/gpu-env.sh
export ABLATE_DB="$PWD/receipts-gpu.db"
A=build-gpu/ablate
SPEC=experiments/nam56r-small-fast.toml
ngpu=$(nvidia-smi -L | wc -l)
run() {  # tag nproc sets...
  local tag=$1 n=$2; shift 2
  local t0=$(date +%s)
  if [ "$n" = 1 ]; then
    $A run $SPEC -q --no-profile --set train.steps=$STEPS --set "experiment.tags=[\"scale\",\"$tag\"]" "$@" >> "$OUT/runs.log" 2>&1
  else
    $A launch --nproc $n $SPEC -q --no-profile --set train.steps=$STEPS --set distributed.backend=\"nccl\" \
      --set "experiment.tags=[\"scale\",\"$tag\"]" "$@" >> "$OUT/runs.log" 2>&1
  fi
  echo "== $tag: rc $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/runs.log"
}
for r in $(seq $ROUNDS); do
  run g1 1
  run g2-none 2 --set compile.cuda_graphs=true
  [ -n "${FULL:-}" ] && run g2-opt 2 --set compile.cuda_graphs=true --set distributed.sharding=\"optimizer\"
  if [ "$ngpu" -ge 4 ]; then
    run g4-none 4 --set compile.cuda_graphs=true
    run g4-opt 4 --set compile.cuda_graphs=true --set distributed.sharding=\"optimizer\"
    run g4-opt-eager 4 --set compile.cuda_graphs=false --set distributed.sharding=\"optimizer\"
    [ -n "${FULL:-}" ] && run g4-grad 4 --set compile.cuda_graphs=true --set distributed.sharding=\"gradients\"
  fi
done
{
  $A runs --tag scale 2>&1 | head -80
  for t in g2-none g2-opt g4-none g4-opt g4-opt-eager g4-grad; do
    echo "## compare g1 vs $t"; $A compare --allow-mismatch tag:g1 tag:$t 2>&1 | head -40
  done
  echo "## compare g4-opt-eager vs g4-opt"; $A compare tag:g4-opt-eager tag:g4-opt 2>&1 | head -40
} > "$OUT/scale.txt"
for id in $($A runs --tag scale --json 2>/dev/null | python3 -c 'import json,sys; [print(r["id"]) for r in json.load(sys.stdin)]' 2>/dev/null | head -3); do
  $A show $id >> "$OUT/shows.txt" 2>&1
done
