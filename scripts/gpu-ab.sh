#!/usr/bin/env bash
# scripts/gpu-ab.sh OUT STEPS REPEATS [--set key=value ...]: the whole-model A/B of the GPU lane:
# $SPEC (default experiments/nam56r-small.toml) as A against the same spec plus the given overrides (B), interleaved A B A B ... so
# machine drift cancels, same seed, tagged <tag>-a / <tag>-b in receipts-gpu.db (repository root, kept
# between calls while the machine is warm). Then `ablate compare` of the two groups and both loss
# curves (every 10th step) into OUT. Expects build-gpu (scripts/gpu-check.sh).
# Environment: COMMON="key=value ..." overrides applied to both sides (values without spaces);
# AB_TAG (default "ab") names the groups, so several A/Bs can share the store.
#   device run: bash scripts/gpu-ab.sh $OUT 200 3 --set backends.rope=fused_cuda ...
#   device run: COMMON="model.moe.capacity_factor=1.25" AB_TAG=graphs bash scripts/gpu-ab.sh $OUT 100 3 \
#                 --set compile.cuda_graphs=true
# Export ABLATE_GIT_REVISION (and ABLATE_GIT_DIRTY) from the dev machine, as scripts/gpu-check.sh says,
# or both sides' receipts record this machine's stale git revision:
#   device run: export ABLATE_GIT_REVISION=<sha> ABLATE_GIT_DIRTY=false; bash scripts/gpu-ab.sh $OUT 200 3 --set ...
set -uo pipefail
OUT=${1:?usage: gpu-ab.sh OUT STEPS REPEATS [--set key=value ...]}
STEPS=${2:?steps}
REPEATS=${3:?repeats}
shift 3
TAG=${AB_TAG:-ab}
BUILD=build-gpu
source scripts/gpu-prebuilt-lane.sh
ensure_gpu_build || exit 2
export ABLATE_DB="$PWD/receipts-gpu.db"
common=()
for kv in ${COMMON:-}; do common+=(--set "$kv"); done
echo "== git revision for receipts: ${ABLATE_GIT_REVISION:-not set: git here, which is stale (see scripts/gpu-check.sh)}"
for r in $(seq "$REPEATS"); do
  for side in a b; do
    extra=(); [ $side = b ] && extra=("$@")
    $BUILD/ablate run "${SPEC:-experiments/nam56r-small.toml}" -q --set train.steps="$STEPS" --set backends.strict=true \
      --set "experiment.tags=[\"$TAG\",\"$TAG-$side\"]" "${common[@]}" "${extra[@]}" >> "$OUT/$TAG.log" 2>&1
    echo "== $TAG $side repeat $r: rc $?"
  done
done
$BUILD/ablate compare "tag:$TAG-a" "tag:$TAG-b" 2>&1 | tee "$OUT/$TAG-compare.txt"
$BUILD/ablate export --format csv --what steps "tag:$TAG" --out "$OUT/$TAG-steps.csv" 2>&1 | tail -2
