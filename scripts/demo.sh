#!/usr/bin/env bash
# scripts/demo.sh BUILD DB: the `make demo` lane. Validates every declared experiment, runs the
# default experiment on the embedded defaults (tiny on CPU, nam56r-small when a GPU is present),
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
  "$ABLATE" run --db "$DB"
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
