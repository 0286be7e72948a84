# scripts/gpu-out.sh: sourced by scripts/gpu-check.sh on the GPU machine: what a device call brings
# back (scripts/gpu-ab.sh packs the same way). The device tool returns at most 8 files from OUT (docs/gpu.md), so pack_logs OUT keeps the
# stores (receipts*.db and any -wal/-shm beside them), ctest.log, show.txt and the benchmarks' JSON as they
# are and moves everything else (logs, the traces folder) into OUT/logs.tgz; a second pack in the same
# OUT unpacks the first, so nothing it held is lost. Tested by tests/scripts/gpu_out_test.sh (ctest: gpu_out).
pack_logs() {
  local out=${1:?usage: pack_logs OUT} list
  if [ -f "$out/logs.tgz" ]; then tar xzf "$out/logs.tgz" -C "$out" && rm -f "$out/logs.tgz"; fi
  list=$(mktemp)
  (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name 'receipts*.db*' ! -name ctest.log ! -name show.txt \
     ! -name '*.json' -printf '%P\n' | sort) > "$list"
  if [ -s "$list" ]; then
    (cd "$out" && tar czf logs.tgz.tmp -T "$list" && mv logs.tgz.tmp logs.tgz && xargs -a "$list" rm -rf)
  fi
  rm -f "$list"
}
