#!/usr/bin/env bash
# tests/scripts/gpu_ncu_test.sh: scripts/gpu-ncu.sh's command line, which runs ncu only on the GPU
# machine: the command it would run (DRY_RUN=1) for the default program and a given one, and each
# refusal (exit 2, saying what to give): a bad SKIP, a regex with other characters, a missing program,
# no ncu. IN_CONTEXT=1: its command, a bad COUNT, and its per-kernel medians from a fake ncu's CSV (with
# the program's own lines mixed in, as they are). Exit 0 passed, 1 a check failed.
#   bash tests/scripts/gpu_ncu_test.sh     (ctest: gpu_ncu)
source "$(dirname "$0")/checks.sh"
cd "$work" && mkdir -p scripts build-gpu/bench && cp "$src"/scripts/{gpu-ncu,gpu-env,gpu-prebuilt-lane}.sh scripts/
for f in build-gpu/ablate build-gpu/bench/kernels_bench fake-ncu; do printf '#!/bin/sh\n' > $f && chmod +x $f; done
run() { DRY_RUN=1 NCU="$work/fake-ncu" bash scripts/gpu-ncu.sh "$@" 2>&1; }

out=$(run out ablate_ssm_scan_bwd_chunk)
contains "default program: the scan benchmark in the model's mix" \
  "build-gpu/bench/kernels_bench --benchmark_filter=ssm_fused_cuda_fwd_bwd_model" "$out"
contains "one launch after 3, clocks left alone" "--launch-skip 3 --launch-count 1 --clock-control none" "$out"
contains "the kernel by regex" "--kernel-name regex:ablate_ssm_scan_bwd_chunk" "$out"
contains "stall reasons asked for" "--section WarpStateStats" "$out"
contains "... and where, by source line" "--section SourceCounters --import-source yes --print-details all" "$out"
out=$(SKIP=0 run out 'ablate_causal_conv_(fwd|bwd)' build-gpu/bench/kernels_bench --x=1)
contains "a given program and its arguments, last" "build-gpu/bench/kernels_bench --x=1" "$out"
contains "SKIP passed through" "--launch-skip 0" "$out"
out=$(run out 'ablate_ssm_scan_bwd_chunk($|[^_])'); check "a bracket expression: accepted" 0 "$?"
contains "... passed through whole (shell-quoted)" 'regex:ablate_ssm_scan_bwd_chunk\(\$\|\[\^_\]\)' "$out"

out=$(IN_CONTEXT=1 SKIP=400 run out ablate_ssm_scan build-gpu/bench/kernels_bench --x=1)
contains "in context: one metric, caches as they are" \
  "--cache-control none --metrics gpu__time_duration.sum --csv --print-units base" "$out"
contains "... COUNT launches (default 60) after SKIP" "--launch-skip 400 --launch-count 60" "$out"
contains "... then the program" "build-gpu/bench/kernels_bench --x=1" "$out"
out=$(IN_CONTEXT=1 COUNT=0 run out k); check "COUNT 0: exit 2" 2 "$?"; contains "... says what to give" "above 0" "$out"
# A fake ncu that prints what ncu --csv prints (and a program line between): kernel a twice, b once.
cat > fake-ncu-csv <<'SH'
#!/bin/sh
echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
echo '"0","1","p","h","void ns::ablate_a<float>(P)","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","3,000"'
echo 'bench/row/manual_time  2.0 ms  1.9 ms  100 GB/s=1'
echo '"1","1","p","h","void ns::ablate_b(P)","1","7","(64, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","500"'
echo '"2","1","p","h","void ns::ablate_a<float>(P)","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,000"'
SH
chmod +x fake-ncu-csv
out=$(IN_CONTEXT=1 NCU="$work/fake-ncu-csv" bash scripts/gpu-ncu.sh out ablate build-gpu/bench/kernels_bench 2>&1)
check "in context, run: exit 0" 0 "$?"
contains "... the CSV kept" "out/ncu-times-ablate.csv" "$out"
contains "... a kernel's launches and median (of 1 and 3 us: the upper middle)" "ablate_a  " "$out"
contains "... ... its numbers" "launches    2  median       3.0 us  min       1.0 us" "$out"
contains "... the other kernel" "launches    1  median       0.5 us" "$out"
printf '#!/bin/sh\necho no rows\n' > fake-ncu-empty && chmod +x fake-ncu-empty
out=$(IN_CONTEXT=1 NCU="$work/fake-ncu-empty" bash scripts/gpu-ncu.sh out ablate build-gpu/bench/kernels_bench 2>&1)
check "in context, nothing matched: fails" 1 "$?"; contains "... says why" "no kernel rows" "$out"

out=$(SKIP=two run out k); check "bad SKIP: exit 2" 2 "$?"; contains "... says what to give" "give a whole number" "$out"
out=$(run out 'k; rm -rf /'); check "odd regex: exit 2" 2 "$?"; contains "... says how" "name the kernel" "$out"
out=$(run out k ./no-such-program); check "missing program: exit 2" 2 "$?"; contains "... says to build" "build first" "$out"
out=$(DRY_RUN=1 NCU=/nonexistent/ncu bash scripts/gpu-ncu.sh out k 2>&1); check "no ncu: exit 2" 2 "$?"
contains "... says where it runs" "run on the GPU machine" "$out"
finish gpu_ncu
