#!/usr/bin/env bash
# scripts/gpu-ab.sh OUT STEPS REPEATS [--set key=value ...]: the whole-model A/B of the GPU lane:
# $SPEC (default experiments/nam56r-small.toml) as A against the same spec plus the given overrides (B), interleaved A B A B ... so
# machine drift cancels, same seed, tagged <tag>-a / <tag>-b in receipts-gpu.db (repository root, kept
# between calls while the machine is warm). Then `ablate compare` of the two groups, the steps as CSV and
# a copy of the store (OUT/receipts-<tag>.db); logs in OUT/logs.tgz. Expects build-gpu
# (scripts/gpu-check.sh) or a carried .gpu-prebuilt.
# Environment: COMMON="key=value ..." overrides applied to both sides (values without spaces);
# AB_TAG (default "ab") names the groups, so several A/Bs can share the store.
#   device run: bash scripts/gpu-ab.sh $OUT 200 3 --set backends.rope=fused_cuda ...
#   device run: COMMON="model.moe.capacity_factor=1.25" AB_TAG=graphs bash scripts/gpu-ab.sh $OUT 100 3 \
#                 --set compile.cuda_graphs=true
# BASELINE=1: an A/B across revisions: side A runs the carried .gpu-baseline's binary (scripts/
# gpu-prebuilt.sh --baseline REV on the dev machine) recording its own revision, side B the current
# build; with no overrides the two differ only by revision, and the comparison allows (and marks) the
# git_revision mismatch. Both revisions must share the receipts schema and the spec's keys.
#   device run (carry .gpu-deps, .gpu-prebuilt, .gpu-baseline): BASELINE=1 SPEC=experiments/nam56r-small-fast.toml \
#                 bash scripts/gpu-ab.sh $OUT 40 3
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
mkdir -p "$OUT"  # the runs' log and the comparison go there
source scripts/gpu-prebuilt-lane.sh
source scripts/gpu-out.sh
trap 'pack_logs "$OUT"' EXIT  # at most 8 files come back: logs into OUT/logs.tgz
ensure_gpu_build || exit 2
side_a=("$BUILD/ablate") compare_flags=()
if [ "${BASELINE:-0}" = 1 ]; then
  use_baseline || exit 2
  side_a=(env ABLATE_GIT_REVISION="$BASELINE_REVISION" ABLATE_GIT_DIRTY=false "$BASELINE_ABLATE")
  compare_flags=(--allow-mismatch)
  echo "== side A: the baseline at $BASELINE_REVISION"
fi
source scripts/gpu-env.sh
export ABLATE_DB="$PWD/receipts-gpu.db"
common=()
for kv in ${COMMON:-}; do common+=(--set "$kv"); done
echo "== git revision for receipts: ${ABLATE_GIT_REVISION:-not set: git here, which is stale (see scripts/gpu-check.sh)}"
for r in $(seq "$REPEATS"); do
  for side in a b; do
    extra=() binary=("${side_a[@]}"); [ $side = b ] && extra=("$@") binary=("$BUILD/ablate")
    "${binary[@]}" run "${SPEC:-experiments/nam56r-small.toml}" -q --set train.steps="$STEPS" --set backends.strict=true \
      --set "experiment.tags=[\"$TAG\",\"$TAG-$side\"]" "${common[@]}" "${extra[@]}" >> "$OUT/$TAG.log" 2>&1
    echo "== $TAG $side repeat $r: rc $?"
  done
done
$BUILD/ablate compare "${compare_flags[@]}" "tag:$TAG-a" "tag:$TAG-b" 2>&1 | tee "$OUT/$TAG-compare.txt"
$BUILD/ablate export --format csv --what steps "tag:$TAG" --out "$OUT/$TAG-steps.csv" 2>&1 | tail -2
# The A/B's receipts come back as OUT/receipts-<tag>.db (a consistent copy of the store).
sqlite3 "$ABLATE_DB" ".backup '$OUT/receipts-$TAG.db'" 2>/dev/null || cp "$ABLATE_DB" "$OUT/receipts-$TAG.db"
