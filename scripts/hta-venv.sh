#!/usr/bin/env bash
# scripts/hta-venv.sh [--check]: the virtual environment scripts/check-trace.py runs in, outside the clone
# ($HTA_VENV, default ~/.cache/ablate/hta-venv), with the versions pinned in scripts/hta-requirements.txt
# (the check cites HTA's source lines). Makes or updates it from PyPI when it lacks a pinned version and
# does nothing when it has them all (safe on every `make`: scripts/bootstrap.sh runs it; a cold install
# took 30 s on the 2-core development machine, 2026-11-28). --check: exit 0 when it is ready, 1 when
# not, installing nothing. Prints the venv's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HTA_VENV:-$HOME/.cache/ablate/hta-venv}
REQ=$PWD/scripts/hta-requirements.txt
ready() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$REQ" <<'EOF' 2>/dev/null
import importlib.metadata as md, sys
pins = [l.split("#")[0].strip() for l in open(sys.argv[1])]
sys.exit(0 if all(md.version(p.split("==")[0]) == p.split("==")[1] for p in pins if p) else 1)
EOF
}
if [ "${1:-}" = --check ]; then
  ready || exit 1
  echo "$VENV"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"  # one install at a time per machine (two clones building at once share it)
flock 9
if ! ready; then
  echo "hta-venv: installing $(paste -sd' ' "$REQ") into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  ready || { echo "hta-venv: $VENV still lacks a version pinned in $REQ" >&2; exit 1; }
fi
echo "$VENV"
