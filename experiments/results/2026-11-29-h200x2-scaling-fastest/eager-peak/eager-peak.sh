#!/usr/bin/env bash
# eager-peak.sh OUT SHA: nam56r-medium on 1 GPU and ZeRO-1 on 2 GPUs (bf16 reduction, 256 MB buckets), graphs
# requested, a profiled window over eager steps 1-2 (before the capture at the last warm-up step): the
# memory probes by phase say where the eager steps' allocated peak is.
set -uo pipefail
OUT=$1 SHA=$2; export ABLATE_GIT_REVISION=$SHA ABLATE_GIT_DIRTY=false
source scripts/gpu-prebuilt-lane.sh; BUILD=build-gpu; ensure_gpu_build > $OUT/prebuilt.log 2>&1 || { tail $OUT/prebuilt.log; exit 2; }
source scripts/gpu-env.sh
export ABLATE_DB=$PWD/peak.db
C="--set train.steps=8 --set train.warmup_steps=4 --set profile.enabled=true --set profile.start_step=1 --set profile.steps=2"
$BUILD/ablate run experiments/nam56r-medium.toml $C -q > $OUT/one.log 2>&1; echo "1 GPU rc $?"
$BUILD/ablate launch experiments/nam56r-medium.toml --nproc 2 $C --set distributed.backend='"nccl"' --set distributed.sharding='"optimizer"' \
  --set distributed.reduce_dtype='"bf16"' --set distributed.bucket_mb=256 -q > $OUT/two.log 2>&1; echo "2 GPUs rc $?"
for id in 1 2; do $BUILD/ablate show $id > $OUT/show-$id.txt 2>&1; done
$BUILD/ablate export --format json --what runs --out $OUT/runs.json > /dev/null 2>&1
$BUILD/ablate export --format csv --what steps --out $OUT/steps.csv > /dev/null 2>&1
cp $ABLATE_DB $OUT/peak.db
grep -E "^summary|memory" $OUT/show-*.txt | head -20
