#!/usr/bin/env bash
# ep-profile.sh OUT SHA: nam56r-large at EP 2 (ZeRO-3, bf16 GEMM weights, capacity 1.25, graphed) on GPUs 0,1:
# one profiled run (CUPTI window of 3 steps at step 10: top kernels, exposed communication by kind), then
# the pipelined exchange (expert_exchange_chunks 2) against one exchange, interleaved, 3 rounds (CHUNKS=0: none).
set -uo pipefail
OUT=$1 SHA=$2; export ABLATE_GIT_REVISION=$SHA ABLATE_GIT_DIRTY=false
S=$OUT/summary.txt; W=$OUT/work; mkdir -p $W
t0=$(date +%s)
nvidia-smi -L > $S
BUILD=build-gpu
note() { echo "$*" >> $S; }
source scripts/gpu-prebuilt-lane.sh
ensure_gpu_build >> $S 2>&1 || { cat $S; exit 2; }
source scripts/gpu-env.sh
export ABLATE_DB=$PWD/receipts-gpu.db CUDA_VISIBLE_DEVICES=0,1
LRG=(experiments/nam56r-large.toml --set distributed.nproc=2 --set distributed.expert_parallel=2 --set 'distributed.backend="nccl"'
     --set model.moe.capacity_factor=1.25 --set backends.strict=true --set train.warmup_steps=5 --set 'distributed.sharding="full"'
     --set 'distributed.param_dtype="bf16"' --set compile.cuda_graphs=true --set train.steps=16)
$BUILD/ablate launch "${LRG[@]}" --set profile.enabled=true --set profile.start_step=10 --set profile.steps=3 \
  --set 'experiment.tags=["profile"]' > $W/profile.log 2>&1
echo "profiled run: rc $? at $(( $(date +%s) - t0 )) s" >> $S
id=$($BUILD/ablate runs --limit 1 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1; exit}')
$BUILD/ablate show $id > $OUT/show.txt 2>&1
$BUILD/ablate show $id --kernels 60 > $OUT/kernels.txt 2>&1
for r in $(seq 1 $(( ${CHUNKS:-1} * 3 ))); do  # CHUNKS=0: the profile alone
  for c in 1 2; do
    $BUILD/ablate launch "${LRG[@]}" --set distributed.expert_exchange_chunks=$c --set "experiment.tags=[\"chunks\",\"chunks-$c\"]" >> $W/chunks-$c.log 2>&1
    echo "chunks $c: rc $? at $(( $(date +%s) - t0 )) s" >> $S
  done
done
$BUILD/ablate compare tag:chunks-1 tag:chunks-2 > $OUT/compare-chunks.txt 2>&1
$BUILD/ablate export --format json --what runs tag:chunks --out $OUT/runs-chunks.json >> $S 2>&1
$BUILD/ablate runs 2>&1 | tail -9 >> $S
(cd $OUT && tar czf all.tgz work && rm -rf work)
head -c 3000 $OUT/compare-chunks.txt; head -c 5000 $OUT/show.txt; head -c 9000 $OUT/kernels.txt; cat $S
