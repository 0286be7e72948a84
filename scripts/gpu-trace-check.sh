# scripts/gpu-trace-check.sh: sourced by scripts/gpu-check.sh on the GPU machine: check_traces DIR LOG runs
# scripts/check-trace.py --strict on the traces of a profiled run (DIR: one *.json.gz per rank), writes its
# output to LOG and prints one line for the summary. With HTA's default settings where the HTA venv
# (scripts/hta-venv.sh --check) or python3 itself has HTA 0.5.0; the GPU machine reaches no package index,
# so there it usually runs the contract stage alone (plain python3: layout, flows, nesting, times HTA's
# rounding keeps) and the line says so: the traces come back in OUT/logs.tgz, and
# `bash scripts/check-trace.sh DIR --strict` on the development machine runs HTA on them. Perfetto's stage
# runs when PERFETTO_TP_SHELL names a local trace_processor_shell (docs/gpu.md), else it is off.
# Tested by tests/scripts/gpu_trace_check_test.sh (ctest: gpu_trace_check).
check_traces() {
  local dir=${1:?usage: check_traces DIR LOG} log=${2:?usage: check_traces DIR LOG} py scope rc
  local perfetto=(--perfetto off)
  if ! compgen -G "$dir/*.json*" > /dev/null; then
    echo "check-trace: no trace in $dir"
    return 0
  fi
  [ -n "${PERFETTO_TP_SHELL:-}" ] && perfetto=(--perfetto require --tp-shell "$PERFETTO_TP_SHELL")
  if py=$(bash scripts/hta-venv.sh --check 2>/dev/null)/bin/python; then
    scope="HTA defaults"
  elif python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("HolisticTraceAnalysis") != "0.5.0")' 2>/dev/null; then
    py=python3 scope="HTA defaults"
  else
    py=python3 scope="contract only, no HTA here: run scripts/check-trace.sh on them where HTA is"
  fi
  if [ "$scope" = "HTA defaults" ]; then
    "$py" scripts/check-trace.py "$dir" --strict "${perfetto[@]}" > "$log" 2>&1
  else
    "$py" scripts/check-trace.py "$dir" --strict --no-hta "${perfetto[@]}" > "$log" 2>&1
  fi
  rc=$?
  echo "$(grep -E '^check-trace (passed|FAILED)' "$log" | tail -1 || true) (rc $rc, $scope; $(basename "$log"))"
}
