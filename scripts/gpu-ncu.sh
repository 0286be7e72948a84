#!/usr/bin/env bash
# scripts/gpu-ncu.sh OUT KERNEL_REGEX [PROGRAM ARGS...]: Nsight Compute on one launch of the kernels whose
# name matches KERNEL_REGEX, with the sections that say why a kernel is slow (speed of light, occupancy,
# launch statistics, warp stall reasons, scheduler, memory and compute workload; with every section's
# details, and the source counters: the hottest stall sites by source line, the kernels carry line
# tables), as OUT/ncu-<tag>.txt (tag: the regex's letters). For a kernel that a benchmark shows far
# above its floor, before rewriting it: e.g. ssm_scan's backward chunk, latency bound at 925f5fd
# (2026-11-25, experiments/results/2026-11-25-h100x2-58ms/).
# PROGRAM defaults to the ssm_scan benchmark at nam56r-small's shape in the model's dtype mix:
#   device run: bash scripts/gpu-check.sh $OUT 0; bash scripts/gpu-ncu.sh $OUT ablate_ssm_scan_bwd_chunk
#   device run: bash scripts/gpu-ncu.sh $OUT ablate_causal_conv_bwd build-gpu/bench/kernels_bench --benchmark_filter=causal_conv
# Environment: SKIP (default 3) launches of the kernel skipped first (warm-up, caches), NCU the ncu
# binary (default: ncu on PATH, else the newest /opt/nvidia/nsight-compute/*/ncu), DRY_RUN=1 prints the
# command instead of running it. Clocks are left alone (--clock-control none: the device notes ask it).
# IN_CONTEXT=1: instead of the sections, each matching kernel's duration where the program runs it (one
# metric, one pass, caches left as the previous kernel left them), COUNT launches (default 60) after
# SKIP, into OUT/ncu-times-<tag>.csv with a median per kernel printed. The sections' default replay
# flushes the caches before the kernel and replays it: that duration can rank two versions of a kernel
# the wrong way round (2026-11-27, experiments/results/2026-11-27-h100-s17/; docs/gpu.md). Judge a
# change to a kernel by this.
#   device run: IN_CONTEXT=1 SKIP=400 bash scripts/gpu-ncu.sh $OUT ablate_ssm_scan
#   (REGEX '.' times every kernel of the program)
# The default program expects build-gpu from gpu-check.sh, or a carried .gpu-prebuilt (ensure_gpu_build).
set -uo pipefail
usage="usage: gpu-ncu.sh OUT KERNEL_REGEX [PROGRAM ARGS...]"
OUT=${1:?$usage}
REGEX=${2:?$usage}
shift 2
SKIP=${SKIP:-3}
[[ "$SKIP" =~ ^[0-9]+$ ]] || { echo "gpu-ncu: SKIP='$SKIP' is not a count of launches: give a whole number" >&2; exit 2; }
# Bracket expressions tell a kernel from its longer-named siblings: 'ablate_ssm_scan_bwd_chunk($|[^_])'.
[[ "$REGEX" =~ ^[][A-Za-z0-9_|.*^$\(\)-]+$ ]] ||
  { echo "gpu-ncu: '$REGEX' is not a kernel-name regex of letters, digits, _ | . * ^ \$ ( ) [ ] -: name the kernel, e.g. ablate_ssm_scan_bwd_chunk" >&2; exit 2; }
if [ $# = 0 ]; then
  BUILD=build-gpu
  source scripts/gpu-prebuilt-lane.sh
  ensure_gpu_build || exit 2
  set -- "$BUILD/bench/kernels_bench" --benchmark_filter=ssm_fused_cuda_fwd_bwd_model --benchmark_min_time=0.05
fi
[ -x "$1" ] || { echo "gpu-ncu: '$1' is not an executable program here: build first (scripts/gpu-check.sh \$OUT 0)" >&2; exit 2; }
NCU=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)}
[ -n "$NCU" ] && [ -x "$NCU" ] ||
  { echo "gpu-ncu: no ncu binary (NCU='${NCU:-}'): run on the GPU machine, or set NCU to Nsight Compute's ncu" >&2; exit 2; }
tag=$(echo "$REGEX" | tr -c 'A-Za-z0-9_\n' '_')
if [ "${IN_CONTEXT:-0}" = 1 ]; then
  COUNT=${COUNT:-60}
  [[ "$COUNT" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-ncu: COUNT='$COUNT' is not a count of launches: give a whole number above 0" >&2; exit 2; }
  what=(--cache-control none --metrics gpu__time_duration.sum --csv --print-units base)
  report="$OUT/ncu-times-$tag.csv"
else
  COUNT=1
  what=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
        --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
        --section SourceCounters --import-source yes --print-details all)
  report="$OUT/ncu-$tag.txt"
fi
cmd=("$NCU" --kernel-name "regex:$REGEX" --launch-skip "$SKIP" --launch-count "$COUNT" --clock-control none
     "${what[@]}" "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
mkdir -p "$OUT"
source scripts/gpu-env.sh
if [ "${IN_CONTEXT:-0}" != 1 ]; then
  "${cmd[@]}" > "$report" 2>&1
  rc=$?
  echo "== ncu on '$REGEX': rc $rc, $report"
  grep -E "Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Shared Memory Configuration Size|Stall|Compute \(SM\) Throughput|Memory Throughput" "$report" | head -30
  exit $rc
fi
"${cmd[@]}" > "$report" 2> "${report%.csv}.err"
rc=$?
echo "== ncu in context on '$REGEX': rc $rc, $report"
# The program's own output shares stdout with ncu's CSV: rows with ncu's columns only.
python3 - "$report" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows or 'Kernel Name' not in rows[0]:
    sys.exit("gpu-ncu: no kernel rows in " + sys.argv[1] + " (did the regex match? see the .err file)")
head = rows[0]
name_at, value_at = head.index('Kernel Name'), head.index('Metric Value')
times = collections.defaultdict(list)
for r in rows[1:]:
    name = r[name_at]
    name = name[name.find('ablate_'):] if 'ablate_' in name else name
    times[name.split('(')[0].split('<')[0][:60]].append(float(r[value_at].replace(',', '')) / 1000)
for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
    v.sort()
    print(f"{name:60s} launches {len(v):4d}  median {v[len(v) // 2]:9.1f} us  min {v[0]:9.1f} us")
PY
summary_rc=$?
[ $rc = 0 ] && rc=$summary_rc
exit $rc
