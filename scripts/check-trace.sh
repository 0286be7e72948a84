#!/usr/bin/env bash
# scripts/check-trace.sh [TRACE_OR_FOLDER...] [check-trace.py options]: do our traces load unchanged in
# Holistic Trace Analysis and Perfetto? Runs scripts/check-trace.py (see its header) in a venv outside the
# clone. With no trace given, it first builds scripts/trace-sample.cpp with the writer's own sources
# (profiling/trace_writer.cpp, attribution.cpp, cupti_names.cpp, kernels/catalog.cpp and the seams' catalog
# rows, libiberty where its header is: no CMake build, one nice'd job) and checks the two-rank synthetic
# trace it writes. Exit 0 passed, 1 a check failed, 2 bad arguments.
#   bash scripts/check-trace.sh                                  # the synthetic trace
#   bash scripts/check-trace.sh runs/12/ --strict                # a run's trace folder, warnings fail too
# The venv: scripts/hta-venv.sh (HolisticTraceAnalysis and perfetto as pinned in scripts/hta-requirements.txt,
# from PyPI), which scripts/bootstrap.sh runs on every `make` and this script runs when it is missing.
# Perfetto's stage needs trace_processor_shell: the perfetto package downloads it on first use (no network
# here: the stage is skipped, saying so); --tp-shell PATH or PERFETTO_TP_SHELL=PATH uses a local one.
# Env: HTA_VENV (default ~/.cache/ablate/hta-venv), OUT (sample build and traces, default ~/.cache/ablate/hta-check),
# SAMPLE (a trace-sample already built, e.g. build/tests/trace_sample: no compile here), HTA_INSTALL=0 (no venv:
# exit 77, skipped, instead of installing one; the CTest check_trace_sample runs it so, offline; with CI=true
# a missing venv is a failure instead, exit 1: CI's bootstrap makes it, so the check must run there).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$HOME/.cache/ablate/hta-check}
if ! VENV=$(bash scripts/hta-venv.sh --check); then
  if [ "${HTA_INSTALL:-1}" = 0 ]; then
    where=${HTA_VENV:-$HOME/.cache/ablate/hta-venv}
    if [ "${CI:-}" = true ]; then
      echo "FAIL: no HolisticTraceAnalysis venv at $where in CI (scripts/bootstrap.sh makes it: bash scripts/hta-venv.sh)"
      exit 1
    fi
    echo "SKIP: no HolisticTraceAnalysis venv at $where (bash scripts/hta-venv.sh makes it, from PyPI)"
    exit 77
  fi
  VENV=$(bash scripts/hta-venv.sh | tail -1)
fi
paths=0 value=0  # any TRACE_OR_FOLDER given? (the values of --perfetto and --tp-shell are none)
for a in "$@"; do
  if [ $value = 1 ]; then value=0; continue; fi
  case $a in --perfetto | --tp-shell) value=1 ;; -*) ;; *) paths=1 ;; esac
done
if [ $paths = 0 ]; then
  mkdir -p "$OUT"
  sample=${SAMPLE:-$OUT/trace-sample}
  if [ -z "${SAMPLE:-}" ]; then
    srcs=(scripts/trace-sample.cpp profiling/trace_writer.cpp profiling/attribution.cpp profiling/cupti_names.cpp
          kernels/catalog.cpp kernels/*/catalog.cpp)
    stale=0
    for s in "${srcs[@]}" profiling/trace_writer.h profiling/activity.h profiling/cupti_names.h \
             tests/profiling/cutlass_kernel_name.h; do [ "$s" -nt "$sample" ] && stale=1; done
    if [ ! -x "$sample" ] || [ $stale = 1 ]; then
      echo "building $sample"
      iberty=()  # the deep demangler, as the CMake build takes it (profiling/CMakeLists.txt)
      [ -f /usr/include/libiberty/demangle.h ] && iberty=(-DABLATE_HAVE_LIBIBERTY=1 -liberty)
      nice -n 19 c++ -std=c++20 -O1 -DFMT_HEADER_ONLY=1 -DABLATE_HAVE_ZLIB=1 -I. "${srcs[@]}" -lz "${iberty[@]}" -o "$sample"
    fi
  fi
  rm -rf "$OUT/traces"
  "$sample" "$OUT/traces"
  set -- "$OUT/traces" "$@"
fi
exec "$VENV/bin/python" scripts/check-trace.py "$@"
