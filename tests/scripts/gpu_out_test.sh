#!/usr/bin/env bash
# tests/scripts/gpu_out_test.sh: scripts/gpu-out.sh's pack_logs, which runs only on the GPU machine
# otherwise: the stores, ctest.log, show.txt and the benchmark JSON stay; logs and the traces folder go
# into logs.tgz with their contents; a second pack keeps what the first packed; an OUT with nothing to
# pack gets no logs.tgz. Exit 0 passed, 1 a check failed.
#   bash tests/scripts/gpu_out_test.sh     (ctest: gpu_out)
source "$(dirname "$0")/checks.sh"
source "$src/scripts/gpu-out.sh"
listing() { (cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort | paste -sd' ' -); }
packed() { tar tzf "$1/logs.tgz" | sed 's|/$||' | sort | paste -sd' ' -; }

out=$work/out
mkdir -p "$out/traces"
for f in receipts.db receipts.db-wal receipts-ab.db ctest.log show.txt kernels_bench.json run.log bench.log; do echo "$f" > "$out/$f"; done
echo trace > "$out/traces/run1_rank0.pt.trace.json.gz"
pack_logs "$out"
check "kept as they are" "ctest.log kernels_bench.json logs.tgz receipts-ab.db receipts.db receipts.db-wal show.txt" "$(listing "$out")"
check "packed with their contents" "bench.log run.log traces traces/run1_rank0.pt.trace.json.gz" "$(packed "$out")"

echo later > "$out/matrix.log"
pack_logs "$out"
check "a second pack keeps the first's" "bench.log matrix.log run.log traces traces/run1_rank0.pt.trace.json.gz" "$(packed "$out")"
check "... and the kept files" "ctest.log kernels_bench.json logs.tgz receipts-ab.db receipts.db receipts.db-wal show.txt" "$(listing "$out")"
mkdir -p "$work/x" && tar xzf "$out/logs.tgz" -C "$work/x"
check "contents survive" "trace" "$(cat "$work/x/traces/run1_rank0.pt.trace.json.gz")"

empty=$work/empty
mkdir -p "$empty" && echo db > "$empty/receipts.db"
pack_logs "$empty"
check "nothing to pack: no logs.tgz" "receipts.db" "$(listing "$empty")"

finish "gpu out"
