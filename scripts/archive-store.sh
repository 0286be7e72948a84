#!/usr/bin/env bash
# scripts/archive-store.sh [DEST]: the project's own measurements in one receipt store, DEST (default
# experiments/stores/archive.db, which git ignores), built from what git keeps: every version of every
# `*.db` that was ever committed (the stores of experiments/results/ until 86ee6ee; each folder's
# README.md says what they hold) is written from history into a temporary folder and `ablate import`ed,
# oldest commit first, then every other store in experiments/stores/. Idempotent: importing a store again
# adds nothing and leaves DEST as it was (docs/receipts.md "Import"), so a second call only adds stores
# that are new. Each store is imported on its own, so one that is refused holds back no other; the
# refused ones are named with import's reason at the end.
#   bash scripts/archive-store.sh                      # then: build/ablate runs --db experiments/stores/archive.db
# Env: ABLATE (default build/ablate). Needs git history and sqlite3 (the counts). Exit 0 every store is in
# DEST; 2 bad arguments, no ablate, no history, or a store was refused (the others are imported).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: archive-store.sh [DEST]   (default experiments/stores/archive.db)"
[ $# -le 1 ] || { echo "archive-store: unexpected arguments '$*'; $usage" >&2; exit 2; }
DEST=${1:-experiments/stores/archive.db}
ABLATE=${ABLATE:-build/ablate}
[ -x "$ABLATE" ] || { echo "archive-store: $ABLATE is not built: run make build (or set ABLATE=PATH)" >&2; exit 2; }
command -v sqlite3 > /dev/null || { echo "archive-store: sqlite3 is missing (apt-get install sqlite3)" >&2; exit 2; }
git rev-parse --verify --quiet HEAD > /dev/null ||
  { echo "archive-store: $PWD has no git history to take the stores from" >&2; exit 2; }
[ ! -d "$DEST" ] || { echo "archive-store: $DEST is a folder: give the archive store's file" >&2; exit 2; }
mkdir -p "$(dirname "$DEST")"
dest_real=$(realpath -m "$DEST")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ablate-archive.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Every blob a commit added or changed at a *.db path, oldest commit first, each once. Written to
# <tmp>/git-<commit>/<path>, so import's provenance (the source's path) names the commit and the path.
sources=()
while read -r commit blob path; do
  file=$tmp/git-${commit:0:12}/$path
  mkdir -p "$(dirname "$file")"
  git cat-file blob "$blob" > "$file"
  sources+=("$file")
done < <(git log --all --reverse --no-renames --format='commit %H' --raw --no-abbrev -- '*.db' |
           awk '/^commit / {c = $2; next}
                /^:/ {split($0, part, "\t"); split(part[1], f, " ");
                      if (f[5] != "D" && !seen[f[4]]++) print c, f[4], part[2]}')
for file in experiments/stores/*.db; do
  [ -f "$file" ] && [ "$(realpath "$file")" != "$dest_real" ] && sources+=("$file")
done
[ ${#sources[@]} -gt 0 ] || { echo "archive-store: no store in git history or experiments/stores/" >&2; exit 2; }

count() {  # count TABLE: its rows in DEST (0 while DEST does not exist)
  # Read-write, so the last connection to close folds the WAL back in (a read-only one leaves it).
  if [ -f "$DEST" ]; then sqlite3 "$DEST" "SELECT count(*) FROM $1"; else echo 0; fi
}
runs_before=$(count runs) steps_before=$(count steps)
added=0 unchanged=0 refused=()
for src in "${sources[@]}"; do
  if out=$("$ABLATE" import "$src" --db "$DEST" 2>&1); then
    echo "${out//$tmp\//}"
    if grep -q ": nothing new" <<< "$out"; then unchanged=$((unchanged + 1)); else added=$((added + 1)); fi
  else
    echo "${out//$tmp\//}" >&2
    refused+=("${src#"$tmp"/}: $(grep -m1 'error' <<< "${out//$tmp\//}")")
  fi
done

echo "archive-store: $DEST: ${#sources[@]} store(s): $added added to it, $unchanged held nothing new, ${#refused[@]} refused;" \
     "runs $runs_before -> $(count runs), step rows $steps_before -> $(count steps)"
if [ ${#refused[@]} -gt 0 ]; then
  printf 'archive-store: refused: %s\n' "${refused[@]}" >&2
  exit 2
fi
