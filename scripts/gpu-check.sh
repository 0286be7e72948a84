#!/usr/bin/env bash
# scripts/gpu-check.sh OUT [STEPS]: the GPU machine's lane in one call (see docs/gpu.md).
# Configures and builds with the machine's own LibTorch (python3's torch) plus the carried headers in
# .gpu-deps/include (SQLite, toml++, Gloo, libiberty) and .gpu-deps/lib/libiberty.a, runs every test suite (GPU tests run for real there), the
# benchmarks, and the default GPU experiment; writes logs, benchmark JSON and receipts.db to OUT and
# prints a short summary last.
#   device run: bash scripts/gpu-check.sh $OUT        (carry .gpu-deps)
# Prebuilt: when .gpu-prebuilt is carried (scripts/gpu-prebuilt.sh on the development machine) and
# matches these sources, it is used instead of the ~3-minute build (tests then run without ctest, TESTS
# read as names joined by |; PREBUILT_OFF=1 builds anyway):
#   device run (carry .gpu-deps and .gpu-prebuilt): bash scripts/gpu-check.sh $OUT
# STEPS=0 skips the experiment; SPEC=FILE runs FILE instead of experiments/nam56r-small.toml; EXTRA_RUNS=N
# adds N unprofiled runs of it. The profiled run's traces go through check-trace (--strict; HTA where
# this machine has it, else the contract stage: scripts/gpu-trace-check.sh), its verdict in the summary
# and its output in check-trace.log. Logs, traces and the rest come back in OUT/logs.tgz (8 files at most
# come back); receipts.db, ctest.log, show.txt and the benchmarks' JSON beside it.
# Environment: BENCH=0 skips the benchmarks, BENCHES="kernels_bench ..." runs only those, BENCH_FILTER
# is passed as --benchmark_filter, TESTS is a ctest -R regex, CTEST_JOBS (default 4) the tests run at
# once (TESTS=none: no tests), TARGETS limits what ninja builds.
# Git revision: this machine's copy of the tree has a stale .git, so receipts made here would record a
# wrong git_revision. Compose the command on the dev machine, where git works, with the revision written
# out (a $(git ...) inside the command would run here, on the stale .git); gpu-matrix.sh and gpu-ab.sh
# want the same:
#   device run: ABLATE_GIT_REVISION=<sha> ABLATE_GIT_DIRTY=false bash scripts/gpu-check.sh $OUT
# <sha>: `git rev-parse HEAD` on the dev machine; ABLATE_GIT_DIRTY=true when `git status --porcelain
# --untracked-files=no` prints anything there. Receipts then record git_revision_source =
# ABLATE_GIT_REVISION; a malformed value makes `ablate run` exit 2; unset, git here is asked.
set -uo pipefail
OUT=${1:?usage: gpu-check.sh OUT [STEPS]}
STEPS=${2:-100}
[[ "${EXTRA_RUNS:-0}" =~ ^[0-9]+$ ]] ||
  { echo "gpu-check: EXTRA_RUNS='$EXTRA_RUNS' is not a count of runs: give a whole number (0 for none)" >&2; exit 2; }
mkdir -p "$OUT"
source scripts/gpu-env.sh
# nvcc must be visible to CMake for the CUDA language (kernels, and the CUDA-only test paths).
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
BUILD=build-gpu
DEPS=$PWD/.gpu-deps/include
summary=()
note() { summary+=("$1"); echo "== $1"; }
# At most 8 files come back: the logs and traces leave in OUT/logs.tgz (scripts/gpu-out.sh).
source scripts/gpu-out.sh
trap 'pack_logs "$OUT"' EXIT
note "git revision for receipts: ${ABLATE_GIT_REVISION:-not set: git here, which is stale (see the header)}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
source scripts/gpu-prebuilt-lane.sh
t0=$(date +%s)
PREBUILT_USED=0
if use_prebuilt; then
  PREBUILT_USED=1
else
  for link in build $BUILD; do [ -L $link ] && rm -f $link; done  # a previous call's prebuilt links
  cmake -G Ninja -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DSQLite3_INCLUDE_DIR="$DEPS" -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 \
    -DCMAKE_CXX_FLAGS="-isystem $DEPS" -DCMAKE_CUDA_FLAGS="-isystem $DEPS" \
    -DCMAKE_INCLUDE_PATH="$DEPS" -DCMAKE_LIBRARY_PATH="$PWD/.gpu-deps/lib" > "$OUT/configure.log" 2>&1 \
    || { tail -40 "$OUT/configure.log"; exit 1; }
  if ! ninja -C $BUILD -j 16 -k 0 ${TARGETS:-} > "$OUT/build.log" 2>&1; then
    grep -E "error|FAILED" "$OUT/build.log" | head -40
    exit 1
  fi
  note "build: $(( $(date +%s) - t0 )) s"
fi

if [ "${TESTS:-}" != none ] && [ "${TESTS:-}" != NONE ]; then
  # Each test process's LibTorch CPU pool is its share of the cores (unless set): CTEST_JOBS processes
  # each spinning a pool as wide as the machine made the stepwise fp64 references of the recurrent scan
  # tests (thousands of tiny ops) take minutes instead of a second.
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ${CTEST_JOBS:-4} > 0 ? $(nproc) / ${CTEST_JOBS:-4} : 1 ))}
  if [ $PREBUILT_USED = 1 ]; then
    prebuilt_tests
  else
    (cd $BUILD && ctest --output-on-failure -j "${CTEST_JOBS:-4}" --timeout 600 ${TESTS:+-R "$TESTS"}) > "$OUT/ctest.log" 2>&1
    grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$OUT/ctest.log" | head -20
    # Which GPU tests ran rather than skipped.
    (cd $BUILD && ctest -N | tail -1) >> "$OUT/ctest.log"
  fi
  note "tests: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
fi

# --benchmark_min_time as a bare number of seconds: Google Benchmark 1.7 (Debian's, the prebuilt lane's)
# takes only that, and 1.8 (Ubuntu's) still does.
for b in $( [ "${BENCH:-1}" = 0 ] || ls $BUILD/bench/* ); do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  [ -z "${BENCHES:-}" ] || [[ " $BENCHES " == *" $name "* ]] || continue
  "$b" --benchmark_out="$OUT/$name.json" --benchmark_out_format=json \
       --benchmark_min_time=0.2 ${BENCH_FILTER:+--benchmark_filter="$BENCH_FILTER"} >> "$OUT/bench.log" 2>&1
  note "bench $name: rc $?"
done

if [ "$STEPS" = 0 ]; then printf '%s\n' "${summary[@]}"; exit 0; fi
export ABLATE_DB="$OUT/receipts.db"
# Profile steps 20-24 (the spec's window) when the run is long enough: kernels, trace, memory by phase.
PROFILE=(); [ "$STEPS" -ge 25 ] && PROFILE=(--set profile.enabled=true --set "profile.trace_dir=\"$OUT/traces\"")
$BUILD/ablate run "${SPEC:-experiments/nam56r-small.toml}" --set train.steps=$STEPS --set train.log_every=10 "${PROFILE[@]}" 2>&1 | tee "$OUT/run.log"
note "${SPEC:-experiments/nam56r-small.toml} run: rc ${PIPESTATUS[0]}"
# The profiled run's traces through check-trace (scripts/gpu-trace-check.sh): its verdict in the summary.
source scripts/gpu-trace-check.sh
[ ${#PROFILE[@]} -gt 0 ] && note "$(check_traces "$OUT/traces" "$OUT/check-trace.log")"
newest_run() { $BUILD/ablate runs --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'; }
profiled_run=$(newest_run)
# EXTRA_RUNS=N: N more runs of the same spec, unprofiled, into the same receipts (a step time from
# several runs on one warm machine).
for i in $(seq "${EXTRA_RUNS:-0}"); do
  $BUILD/ablate run "${SPEC:-experiments/nam56r-small.toml}" -q --no-profile --set train.steps=$STEPS >> "$OUT/run.log" 2>&1
  note "extra run $i: rc $?"
done
$BUILD/ablate runs > "$OUT/runs.txt" 2>&1
$BUILD/ablate show "$profiled_run" --kernels 25 > "$OUT/show.txt" 2>&1 && grep -E "^(profiling|backend mismatch)" "$OUT/show.txt"
cat "$OUT/runs.txt"
echo
echo "==== summary"
printf '%s\n' "${summary[@]}"
