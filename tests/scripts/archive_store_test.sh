#!/usr/bin/env bash
# tests/scripts/archive_store_test.sh: scripts/archive-store.sh in a scratch repository whose history holds
# stores as the project's did (committed under experiments/results/, one changed in a later commit, one
# committed twice under two names, all deleted at the head; made from the frozen schema fixtures), plus
# stores in experiments/stores/: every version is imported once, a store that is not one is refused by
# name with import's reason while the others go in (exit 2), a second call adds nothing and leaves the
# archive byte for byte as it was (exit 0), provenance names the commit and path, bad arguments exit 2.
#   ABLATE=build/ablate bash tests/scripts/archive_store_test.sh     (ctest: archive_store)
source "$(dirname "$0")/checks.sh"
: "${ABLATE:?set ABLATE to the built ablate}"
fixtures=$src/tests/fixtures/receipts

repo=$work/repo
mkdir -p "$repo/scripts" "$repo/experiments/results/a" "$repo/experiments/results/b" "$repo/experiments/stores"
cp "$src/scripts/archive-store.sh" "$repo/scripts/"
cd "$repo"
git init -q .
commit() { git add -A && git -c user.name=test -c user.email=test@example.com commit -q -m "$1"; }
store() {  # store FILE VERSION: a store of schema VERSION with the fixture's runs
  rm -f "$1" && sqlite3 "$1" < "$fixtures/schema_v$2.sql"
}
store experiments/results/a/receipts.db 1                      # 1 run, 4 step rows
cp experiments/results/a/receipts.db experiments/results/b/same-as-a.db
echo notes > experiments/results/a/README.md
commit "results a"
first=$(git rev-parse HEAD)
store experiments/results/a/receipts.db 3                      # changed: the first run and a second
store experiments/results/b/receipts.db 6                      # 4 runs, two of them new, 9 step rows
commit "results b"
git rm -q experiments/results/a/receipts.db experiments/results/b/receipts.db experiments/results/b/same-as-a.db
commit "stores out of the tree"
# Beside the archive: a store with a run the history lacks, and a file that is no store.
store experiments/stores/extra.db 1
sqlite3 experiments/stores/extra.db "INSERT INTO runs SELECT 2, name, status, error, started_at + 100, ended_at + 100,
  heartbeat_at + 100, pid, host, tags, lane, spec_hash, matrix_id, cell, repeat, steps, median_step_ms, tokens_per_s, mfu,
  goodput_pct, peak_memory_bytes, flops_version, summary_json FROM runs WHERE id = 1"
echo "not a store" > experiments/stores/notes.db

out=$(ABLATE=$ABLATE bash scripts/archive-store.sh 2>&1); rc=$?
check "a refused store is exit 2" 2 "$rc"
contains "... named, with import's reason" "archive-store: refused: experiments/stores/notes.db: ablate: error:" "$out"
contains "the rest go in: every version once, the store beside it" \
  "experiments/stores/archive.db: 5 store(s): 4 added to it, 0 held nothing new, 1 refused; runs 0 -> 5, step rows 0 -> 9" "$out"
count() { sqlite3 experiments/stores/archive.db "$1"; }
check "the archive holds each run once" "5" "$(count "SELECT count(DISTINCT uid) FROM runs")"
contains "provenance names the commit and the path" "/git-${first:0:12}/experiments/results/a/receipts.db" \
  "$(count "SELECT source_path FROM imports ORDER BY id LIMIT 1")"

rm experiments/stores/notes.db
before=$(sha256sum experiments/stores/archive.db)
out=$(ABLATE=$ABLATE bash scripts/archive-store.sh 2>&1); rc=$?
check "a second call is exit 0" 0 "$rc"
contains "... and adds nothing" "4 store(s): 0 added to it, 4 held nothing new, 0 refused; runs 5 -> 5" "$out"
check "... leaving the archive as it was" "$before" "$(sha256sum experiments/stores/archive.db)"
check "... with no WAL left beside it" "" "$(ls experiments/stores/archive.db-wal 2> /dev/null)"

out=$(ABLATE=$ABLATE bash scripts/archive-store.sh a.db b.db 2>&1); rc=$?
check "two destinations are exit 2" 2 "$rc"
contains "... with the usage" "usage: archive-store.sh [DEST]" "$out"
out=$(ABLATE=$ABLATE bash scripts/archive-store.sh experiments 2>&1); rc=$?
check "a folder as the destination is exit 2" 2 "$rc"
contains "... saying so" "experiments is a folder" "$out"
out=$(ABLATE=$work/none bash scripts/archive-store.sh 2>&1); rc=$?
check "no ablate is exit 2" 2 "$rc"
contains "... saying what to build" "is not built: run make build" "$out"

finish archive_store
