#!/usr/bin/env bash
# scripts/demo.sh BUILD DB: the `make demo` lane. Validates every declared experiment, runs the
# default experiment: on a machine with an NVIDIA GPU the fastest posture (experiments/nam56r-small-fast.toml,
# strict off, so a backend this GPU cannot run falls back and the receipt says why), elsewhere the embedded
# defaults (tiny on the CPU),
# prints the receipt and writes its report (reports/run-ID/: Markdown, HTML, JSON, plots).
# Idempotent: each call adds one run to DB.
set -euo pipefail
BUILD=${1:-build}
DB=${2:-receipts.db}
ABLATE="$BUILD/ablate"

echo "== validating experiments/*.toml"
"$ABLATE" validate --quiet experiments/*.toml

if "$ABLATE" --help | grep -q "^  run "; then
  echo "== running the default experiment (receipt in $DB)"
  set +e
  if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    "$ABLATE" run experiments/nam56r-small-fast.toml --set backends.strict=false --db "$DB"
  else
    "$ABLATE" run --db "$DB"
  fi
  rc=$?
  set -e
  echo "== the run, as the receipt store holds it"
  "$ABLATE" runs --db "$DB" --limit 5
  id=$("$ABLATE" runs --db "$DB" --limit 1 --json | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$')
  echo "== its report"
  "$ABLATE" report "$id" --db "$DB" --out "reports/run-$id"
  exit $rc
else
  echo "== this build has no LibTorch runner; showing the catalog and the stored runs"
  "$ABLATE" catalog
  "$ABLATE" runs --db "$DB" --limit 5
fi
