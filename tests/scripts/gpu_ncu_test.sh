#!/usr/bin/env bash
# tests/scripts/gpu_ncu_test.sh: scripts/gpu-ncu.sh's command line, which runs ncu only on the GPU
# machine: the command it would run (DRY_RUN=1) for the default program and a given one, and each
# refusal (exit 2, saying what to give): a bad SKIP, a regex with other characters, a missing program,
# no ncu. Exit 0 passed, 1 a check failed.
#   bash tests/scripts/gpu_ncu_test.sh     (ctest: gpu_ncu)
source "$(dirname "$0")/checks.sh"
cd "$work" && mkdir -p scripts build-gpu/bench && cp "$src"/scripts/{gpu-ncu,gpu-env,gpu-prebuilt-lane}.sh scripts/
for f in build-gpu/ablate build-gpu/bench/scans_bench fake-ncu; do printf '#!/bin/sh\n' > $f && chmod +x $f; done
run() { DRY_RUN=1 NCU="$work/fake-ncu" bash scripts/gpu-ncu.sh "$@" 2>&1; }

out=$(run out ablate_ssm_scan_bwd_chunk)
contains "default program: the scan benchmark in the model's mix" \
  "build-gpu/bench/scans_bench --benchmark_filter=ssm_fused_cuda_fwd_bwd_autocast" "$out"
contains "one launch after 3, clocks left alone" "--launch-skip 3 --launch-count 1 --clock-control none" "$out"
contains "the kernel by regex" "--kernel-name regex:ablate_ssm_scan_bwd_chunk" "$out"
contains "stall reasons asked for" "--section WarpStateStats" "$out"
contains "... and where, by source line" "--section SourceCounters --import-source yes --print-details all" "$out"
out=$(SKIP=0 run out 'ablate_causal_conv_(fwd|bwd)' build-gpu/bench/scans_bench --x=1)
contains "a given program and its arguments, last" "build-gpu/bench/scans_bench --x=1" "$out"
contains "SKIP passed through" "--launch-skip 0" "$out"
out=$(run out 'ablate_ssm_scan_bwd_chunk($|[^_])'); check "a bracket expression: accepted" 0 "$?"
contains "... passed through whole (shell-quoted)" 'regex:ablate_ssm_scan_bwd_chunk\(\$\|\[\^_\]\)' "$out"

out=$(SKIP=two run out k); check "bad SKIP: exit 2" 2 "$?"; contains "... says what to give" "give a whole number" "$out"
out=$(run out 'k; rm -rf /'); check "odd regex: exit 2" 2 "$?"; contains "... says how" "name the kernel" "$out"
out=$(run out k ./no-such-program); check "missing program: exit 2" 2 "$?"; contains "... says to build" "build first" "$out"
out=$(DRY_RUN=1 NCU=/nonexistent/ncu bash scripts/gpu-ncu.sh out k 2>&1); check "no ncu: exit 2" 2 "$?"
contains "... says where it runs" "run on the GPU machine" "$out"
finish gpu_ncu
