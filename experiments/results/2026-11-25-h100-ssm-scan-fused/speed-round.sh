#!/usr/bin/env bash
# experiments/results/2026-11-25-h100-ssm-scan-fused/speed-round.sh OUT [BENCH_FILTER]: one GPU round of
# the ssm_scan fused_cuda speed work, on the GPU machine (docs/gpu.md), from the repository root with
# .gpu-deps carried. Builds only kernels_tests and scans_bench, prints the kernels' registers / shared
# memory / spills (cuobjdump), runs the ssm parity tests (xml with each row's relative errors), the
# ssm benchmarks, and times each fused launch with ncu (first forward+backward step of the bf16 and the
# fp32 benchmark). Writes build.log, res.txt, tests.txt, tests.xml, bench.txt, ncu.csv to OUT.
#   device run: cd .stage/<name> && cp -r ../../.gpu-deps . && bash <this script> $OUT
set -uo pipefail
OUT=${1:?usage: speed-round.sh OUT [BENCH_FILTER]}
FILTER=${2:-ssm_(fused_cuda|reference)}
export PATH=/usr/local/cuda/bin:$PATH
DEPS=$PWD/.gpu-deps/include
PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
t0=$(date +%s)
cmake -G Ninja -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DSQLite3_INCLUDE_DIR="$DEPS" -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 \
  -DCMAKE_CXX_FLAGS="-isystem $DEPS" -DCMAKE_CUDA_FLAGS="-isystem $DEPS" > "$OUT/build.log" 2>&1 &&
  ninja -C build-gpu -j 16 kernels_tests scans_bench >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
echo "== build: $(( $(date +%s) - t0 )) s"
cuobjdump -res-usage build-gpu/kernels/CMakeFiles/ablate_kernels.dir/cuda/ssm_scan.cu.o 2>&1 |
  grep -A1 ablate_ssm_scan | grep -E "Function|REG" | paste - - | sed -E 's/.*Function ([^:]*):.*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+).*/\2 \1/' > "$OUT/res.txt"
cat "$OUT/res.txt" | cut -c1-120

build-gpu/tests/kernels_tests --gtest_filter='*ssm_scan*:SsmScan*:FusedSsmScan*:Scans*' \
  --gtest_output=xml:"$OUT/tests.xml" > "$OUT/tests.txt" 2>&1
echo "== tests rc $?: $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is" "$OUT/tests.txt" | head -30
# The largest relative errors of the fused bf16 / fp32 rows (output and gradient) against their bounds.
python3 - "$OUT/tests.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
worst = {}
for tc in ET.parse(sys.argv[1]).iter('testcase'):
    if 'fused_cuda' not in (tc.get('value_param') or '') and 'fused_cuda' not in tc.get('name', ''): continue
    for prop in tc.iter('property'):
        dt = 'bf16' if 'bf16' in (tc.get('value_param') or tc.get('name')) else 'fp32'
        kind = 'output' if prop.get('name').startswith('output') else 'gradient'
        worst[(dt, kind)] = max(worst.get((dt, kind), 0.0), float(prop.get('value')))
for k, v in sorted(worst.items()): print('worst', k, '%.3g' % v)
EOF

build-gpu/bench/scans_bench --benchmark_filter="$FILTER" --benchmark_min_time=0.3s > "$OUT/bench.txt" 2>&1
echo "== bench rc $?"
grep -E "^ssm_" "$OUT/bench.txt" | awk '{printf "%-70s %10s %s\n", $1, $2, $3}'

for io in bf16 fp32; do
  ncu --clock-control none -k regex:ablate_ssm_scan -c 8 --csv --print-units base --metrics gpu__time_duration.sum \
    build-gpu/bench/scans_bench --benchmark_filter="ssm_fused_cuda_fwd_bwd_$io" --benchmark_min_time=0.001s \
    2>/dev/null | grep ablate_ssm | sed "s/^/$io,/" >> "$OUT/ncu.csv"
done
python3 - "$OUT/ncu.csv" <<'EOF'
import csv, sys
for row in csv.reader(open(sys.argv[1])):
    name = next((c for c in row if 'ablate_ssm_scan' in c), '?').split('<')[0].split('(')[0]
    print('%-5s %-36s %10.1f us (%s)' % (row[0], name, float(row[-1].replace(',', '')) / 1e3, row[-2]))
EOF
