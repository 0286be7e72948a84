#!/usr/bin/env bash
# ep-ab.sh OUT SHA: this tree (B) against the carried .gpu-baseline (A) at EP 2 on GPUs 0,1, interleaved
# A B, 3 rounds: nam56r-medium (ZeRO-1, capacity 1.25, graphed, 25 steps), then nam56r-large (ZeRO-3,
# bf16 GEMM weights, graphed, 16 steps) (MODELS="med lrg" picks); first (PRE=1) the kernel tests
# PRE_TESTS and the benchmarks PRE_BENCH on GPU 0 (default: copy_blocks'); then an FP8 experts smoke at
# EP 2 (B, FP8=1) and the ctest regex POST_TESTS (default DistributedGpuTest) while time remains (LIMIT s).
set -uo pipefail
OUT=$1 SHA=$2; export ABLATE_GIT_DIRTY=false
S=$OUT/summary.txt; W=$OUT/work; mkdir -p $W
t0=$(date +%s); LIMIT=${LIMIT:-560}
nvidia-smi -L > $S
BUILD=build-gpu
note() { echo "$*" >> $S; }
source scripts/gpu-prebuilt-lane.sh
ensure_gpu_build >> $S 2>&1 || { cat $S; exit 2; }
use_baseline >> $S 2>&1 || { cat $S; exit 2; }
source scripts/gpu-env.sh
export ABLATE_DB=$PWD/receipts-gpu.db CUDA_VISIBLE_DEVICES=0,1
echo "baseline $BASELINE_REVISION, current $SHA" >> $S
if [ "${PRE:-0}" = 1 ]; then
  PRE_TESTS=${PRE_TESTS:-'CopyBlocks*:ExpertGroups*:*moe_dispatch*:*ExpertExchange*'} PRE_BENCH=${PRE_BENCH:-copy_blocks}
  CUDA_VISIBLE_DEVICES=0 $BUILD/tests/kernels_tests --gtest_filter="$PRE_TESTS" > $W/kernels-tests.txt 2>&1
  echo "kernels_tests ($PRE_TESTS): rc $?" >> $S; grep -E "PASSED|FAILED" $W/kernels-tests.txt >> $S
  CUDA_VISIBLE_DEVICES=0 $BUILD/bench/kernels_bench --benchmark_filter="$PRE_BENCH" --benchmark_repetitions=3 > $OUT/bench-$PRE_BENCH.txt 2>&1
  echo "kernels_bench $PRE_BENCH: rc $? at $(( $(date +%s) - t0 )) s" >> $S
fi
EP=(--set distributed.nproc=2 --set distributed.expert_parallel=2 --set 'distributed.backend="nccl"'
    --set model.moe.capacity_factor=1.25 --set backends.strict=true --set train.warmup_steps=5)
MED=(experiments/nam56r-medium.toml "${EP[@]}" --set 'distributed.sharding="optimizer"' --set train.steps=25)
LRG=(experiments/nam56r-large.toml "${EP[@]}" --set 'distributed.sharding="full"' --set 'distributed.param_dtype="bf16"'
     --set compile.cuda_graphs=true --set train.steps=16)
side() {  # side MODEL(med|lrg) a|b
  local m=$1 s=$2 bin=("$BUILD/ablate") rev=$SHA args
  [ $s = a ] && bin=("$BASELINE_ABLATE") rev=$BASELINE_REVISION
  if [ $m = med ]; then args=("${MED[@]}"); else args=("${LRG[@]}"); fi
  ABLATE_GIT_REVISION=$rev "${bin[@]}" launch "${args[@]}" --set "experiment.tags=[\"epab\",\"$m-$s\"]" >> $W/$m-$s.log 2>&1
  echo "$m $s: rc $? at $(( $(date +%s) - t0 )) s" >> $S
}
for m in ${MODELS:-med lrg}; do
  for r in 1 2 3; do side $m a; side $m b; done
  $BUILD/ablate compare tag:$m-a tag:$m-b --allow-mismatch > $OUT/compare-$m.txt 2>&1
done
$BUILD/ablate export --format json --what runs tag:epab --out $OUT/runs.json >> $S 2>&1
if [ "${FP8:-1}" = 1 ] && [ $(( LIMIT - ($(date +%s) - t0) )) -gt 60 ]; then
  ABLATE_GIT_REVISION=$SHA $BUILD/ablate launch "${MED[@]}" --set train.steps=12 --set 'backends.moe_dispatch="grouped_mm_fp8_rowwise"' \
    --set 'experiment.tags=["fp8-ep-smoke"]' > $W/fp8.log 2>&1
  echo "fp8 experts EP 2 smoke: rc $?" >> $S; grep -iE "loss|error|MFU" $W/fp8.log | tail -4 >> $S
fi
left=$(( LIMIT - ($(date +%s) - t0) ))
if [ $left -gt 100 ]; then
  ABLATE_GIT_REVISION=$SHA TESTS=${POST_TESTS:-DistributedGpuTest} STEPS=0 BENCH=0 CTEST_JOBS=1 timeout $left bash scripts/gpu-check.sh $W/check 0 > $W/check.txt 2>&1
  grep -E "^== (tests|prebuilt)" $W/check.txt >> $S
  (cd $W/check && tar xzf logs.tgz 2>/dev/null; grep -E "^(Passed|Failed|Timeout|Skipped)" prebuilt-results.txt; grep -A30 -E "^(Failed|Timeout)" prebuilt-results.txt | head -60) >> $S
fi
$BUILD/ablate runs 2>&1 | tail -16 >> $S
(cd $OUT && tar czf all.tgz work && rm -rf work)
for m in ${MODELS:-med lrg}; do head -c 6000 $OUT/compare-$m.txt; done; cat $S
