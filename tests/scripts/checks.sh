# tests/scripts/checks.sh: what the shell tests under tests/scripts share, sourced first: src (the
# repository), work (a scratch folder removed on exit), the check helpers, and finish NAME, which
# prints the summary and returns the test's status (0 when every check passed).
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected [$2], got [$3]"; failures=$((failures + 1)); fi
}
contains() {  # contains NAME NEEDLE HAYSTACK
  if [[ "$3" == *"$2"* ]]; then echo "ok   $1"; else echo "FAIL $1: [$3] lacks [$2]"; failures=$((failures + 1)); fi
}
finish() {  # finish NAME: the summary line, then the status
  [ "$failures" = 0 ] && echo "$1: every check passed" || echo "$1: $failures check(s) failed"
  [ "$failures" = 0 ]
}
