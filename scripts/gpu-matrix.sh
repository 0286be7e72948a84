#!/usr/bin/env bash
# scripts/gpu-matrix.sh OUT MATRIX [--gpus 0,1] [--repeats N --set K=V --axis K=[..] --name NAME]: runs
# (or resumes) an ablation matrix, as its file says or changed by `matrix run`'s options, on the GPU
# machine into receipts-gpu.db at the repository root (ignored, so it stays between calls while the
# machine is warm: a matrix longer than one call's limit resumes in the next), then writes its report
# (OUT/report.tgz: Markdown, HTML, JSON, SVGs), its gate verdicts (OUT/gate.txt) and a copy of the
# store (OUT/receipts.db). Expects the build of scripts/gpu-check.sh (build-gpu) in place, or a carried
# .gpu-prebuilt (its links are made again here).
# MATRIX_TIMEOUT (seconds) stops the matrix run early (its current cell is recorded as killed and
# re-run on resume) so the report still comes back within the call.
#   device run: STEPS=0 BENCH=0 TESTS=NONE bash scripts/gpu-check.sh $OUT; bash scripts/gpu-matrix.sh $OUT ablations/fast_paths.toml
# Export ABLATE_GIT_REVISION (and ABLATE_GIT_DIRTY) from the dev machine, as scripts/gpu-check.sh says,
# or the matrix's receipts record this machine's stale git revision:
#   device run: export ABLATE_GIT_REVISION=<sha> ABLATE_GIT_DIRTY=false; bash scripts/gpu-matrix.sh $OUT ablations/fast_paths.toml
set -uo pipefail
OUT=${1:?usage: gpu-matrix.sh OUT MATRIX [--gpus LIST]}
MATRIX=${2:?usage: gpu-matrix.sh OUT MATRIX [--gpus LIST]}
shift 2
BUILD=build-gpu
source scripts/gpu-prebuilt-lane.sh
ensure_gpu_build || exit 2
source scripts/gpu-env.sh
export ABLATE_DB="$PWD/receipts-gpu.db"
echo "== git revision for receipts: ${ABLATE_GIT_REVISION:-not set: git here, which is stale (see scripts/gpu-check.sh)}"
# The matrix's name in the store: the file's, or the one --name gives (a variant run from the command line).
name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$MATRIX" | head -1)
args=("$@")
for i in "${!args[@]}"; do
  case ${args[i]} in
    --name) name=${args[i + 1]:-$name} ;;
    --name=*) name=${args[i]#--name=} ;;
  esac
done
timeout -s TERM "${MATRIX_TIMEOUT:-100000}" $BUILD/ablate matrix run "$MATRIX" --logs "$OUT/matrix-logs" "$@" 2>&1 \
  | tee "$OUT/matrix.log"
echo "== matrix run: rc ${PIPESTATUS[0]}"
$BUILD/ablate report --matrix "$name" --out "$OUT/report" 2>&1 | tail -5
$BUILD/ablate gate --matrix "$name" > "$OUT/gate.txt" 2>&1
echo "== gate: rc $?"
grep -E "^gate " "$OUT/gate.txt"
sqlite3 "$ABLATE_DB" ".backup '$OUT/receipts.db'" 2>/dev/null || cp "$ABLATE_DB" "$OUT/receipts.db"
sed -n '/^## Summary/,/^## /p' "$OUT/report/report.md" | head -30
# One archive: the device returns few files.
(cd "$OUT" && tar czf report.tgz report matrix-logs && rm -rf matrix-logs report)
