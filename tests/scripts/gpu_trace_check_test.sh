#!/usr/bin/env bash
# tests/scripts/gpu_trace_check_test.sh: scripts/gpu-trace-check.sh's check_traces, which runs only on the
# GPU machine otherwise (scripts/gpu-check.sh): on the synthetic two-rank traces (SAMPLE: the trace_sample
# binary) without an HTA venv it runs the contract stage and says so, passing; a trace whose slice HTA's
# rounding would turn negative fails it; a folder without traces says so; with the HTA venv (when this
# machine has it) the full check passes. Exit 0 passed, 1 a check failed.
#   SAMPLE=build/tests/trace_sample bash tests/scripts/gpu_trace_check_test.sh     (ctest: gpu_trace_check)
source "$(dirname "$0")/checks.sh"
cd "$src"
source scripts/gpu-trace-check.sh
"${SAMPLE:?SAMPLE=path of the trace_sample binary}" "$work/traces" > /dev/null

line=$(HTA_VENV=$work/no-venv check_traces "$work/traces" "$work/contract.log")
contains "contract stage passes" "check-trace passed: 0 failed, 0 warned" "$line"
contains "... and says HTA did not run" "contract only, no HTA here" "$line"
contains "... the log has the contract lines" "ok   rank1.trace.json.gz: contract" "$(cat "$work/contract.log")"

# A kernel written with Kineto's nanosecond digits inside one microsecond: HTA's rounding makes it negative.
mkdir -p "$work/bad"
python3 - "$work/traces/rank0.trace.json.gz" "$work/bad/rank0.trace.json" <<'PY'
import gzip, json, sys
trace = json.load(gzip.open(sys.argv[1], "rt"))
for e in trace["traceEvents"]:
    if e.get("ph") == "X" and e.get("cat") == "kernel" and e["dur"] >= 1:
        e["ts"] += 0.1
        e["dur"] = 0.7
        break
else:
    sys.exit("no kernel in the sample")
open(sys.argv[2], "w").write(json.dumps(trace))
PY
line=$(HTA_VENV=$work/no-venv check_traces "$work/bad" "$work/bad.log")
contains "a slice HTA would turn negative fails" "check-trace FAILED" "$line"
contains "... and the log says why" "negative duration from HTA's default rounding" "$(cat "$work/bad.log")"

mkdir -p "$work/empty"
check "no traces" "check-trace: no trace in $work/empty" "$(check_traces "$work/empty" "$work/empty.log")"

if bash scripts/hta-venv.sh --check > /dev/null; then
  line=$(check_traces "$work/traces" "$work/hta.log")
  contains "with the HTA venv: the full check passes" "check-trace passed: 0 failed, 0 warned" "$line"
  contains "... with HTA's defaults" "HTA defaults" "$line"
  contains "... temporal breakdown ran" "ok   hta $work/traces: get_temporal_breakdown" "$(cat "$work/hta.log")"
else
  echo "skip the full check: no HTA venv here (scripts/hta-venv.sh)"
fi
finish "gpu trace check"
