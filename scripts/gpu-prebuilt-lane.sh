# scripts/gpu-prebuilt-lane.sh: sourced by scripts/gpu-check.sh on the GPU machine: the prebuilt lane.
# use_prebuilt: takes the carried .gpu-prebuilt (scripts/gpu-prebuilt.sh: STAMP and tree.tar.xz) as the
#   build when it was staged from exactly these sources (scripts/source-hash.sh) at this path and a
#   smoke test passes; unpacks it into .gpu-prebuilt/tree, links build and $BUILD to that, and points
#   the binaries' LibTorch RUNPATH at this machine's LibTorch.
#   Returns 1, with the reason noted, when it cannot: the caller then builds as before.
# prebuilt_tests: the tests without ctest (its discovery files name the other machine's CMake): every
#   test of every suite matching TESTS, one process each, CTEST_JOBS at once, from build/ with ABLATE_DB
#   unset and a 600 s limit, as ctest runs them; a summary line in ctest's words.
# use_baseline: unpacks a carried .gpu-baseline (scripts/gpu-prebuilt.sh --baseline REV) where its
#   binaries' RUNPATH expects them (the worktree path it was built at, <root>/build), or one kept from an
#   earlier prebuilt (--baseline-from-prebuilt) into .gpu-baseline/tree with a wrapper that puts its
#   libraries first; links LibTorch, smoke-tests it and sets BASELINE_ABLATE, BASELINE_TREE (its bench/
#   and tests/ where the tree has them: LD_LIBRARY_PATH=$BASELINE_TREE/kernels to run them) and
#   BASELINE_REVISION; returns 1, saying why, when it cannot.
# ensure_gpu_build: for scripts that run on an earlier call's build (gpu-matrix.sh, gpu-ab.sh): the
#   device machine's tree sync drops the prebuilt links between calls, so they are made again from the
#   carried .gpu-prebuilt; without either, says to run gpu-check.sh first and returns 1.
# Expects from the caller: OUT, BUILD and note() (ensure_gpu_build: OUT and BUILD only); TORCH_LIB, when
# unset, is python3's torch/lib.

PREBUILT=.gpu-prebuilt

# Why the prebuilt tree cannot be used here (empty when it can).
prebuilt_refusal() {
  [ "${PREBUILT_OFF:-0}" = 1 ] && { echo "PREBUILT_OFF=1"; return; }
  [ -f $PREBUILT/STAMP ] && [ -f $PREBUILT/tree.tar.xz ] || { echo "none carried"; return; }
  [ "$(sed -n 's/^root=//p' $PREBUILT/STAMP)" = "$PWD" ] || { echo "staged for another path than $PWD"; return; }
  [ "$(sed -n 's/^source_hash=//p' $PREBUILT/STAMP)" = "$(bash scripts/source-hash.sh)" ] ||
    { echo "staged from other sources than these (scripts/source-hash.sh differs)"; return; }
  local link
  for link in build "$BUILD"; do
    [ ! -e "$link" ] || [ -L "$link" ] || { echo "$link/ is a real build here (a warm machine): ninja is quicker"; return; }
  done
  if [ -n "${TESTS:-}" ] && [ "$TESTS" != none ] && ! [[ "$TESTS" =~ ^[A-Za-z0-9_/|\\.*-]+$ ]]; then
    echo "TESTS '$TESTS' is more than names joined by | (the prebuilt lane turns it into a gtest filter)"
  fi
}

# This machine's LibTorch folder (python3's torch).
torch_lib_dir() { python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))'; }

# The LibTorch folder a binary's RUNPATH names (the dev machine's venv) made a link to this machine's.
link_torch_runpath() {
  local entry
  TORCH_LIB=${TORCH_LIB:-$(torch_lib_dir)}
  for entry in $(readelf -d "$1" 2>/dev/null | sed -n 's/.*[Rr][Uu][Nn][Pp][Aa][Tt][Hh]: \[\(.*\)\]/\1/p' | tr ':' ' '); do
    case "$entry" in
      */torch/lib) [ -e "$entry" ] || { mkdir -p "$(dirname "$entry")" && ln -s "$TORCH_LIB" "$entry"; } ;;
    esac
  done
}

# The same for the CLI of a staged tree: ablate-train loads LibTorch (ablate, where a tree predates
# ablate-train).
link_torch_runpath_of() {
  local b
  for b in "$1/ablate" "$1/ablate-train"; do [ ! -f "$b" ] || link_torch_runpath "$b"; done
}

use_prebuilt() {
  local why
  why=$(prebuilt_refusal)
  [ -z "$why" ] || { note "prebuilt: not used: $why"; return 1; }
  # The tree travels as one xz archive (~10 MB against ~40): unpacked here, then linked as both builds.
  rm -rf $PREBUILT/tree && mkdir -p $PREBUILT/tree && tar xJf $PREBUILT/tree.tar.xz -C $PREBUILT/tree ||
    { note "prebuilt: not used: could not unpack $PREBUILT/tree.tar.xz"; return 1; }
  ln -sfn $PREBUILT/tree build && ln -sfn $PREBUILT/tree "$BUILD"
  link_torch_runpath_of $PREBUILT/tree
  mkdir -p "$OUT"  # its smoke log goes there, before a caller may have made OUT
  if ! "$BUILD/ablate" catalog > "$OUT/prebuilt-smoke.log" 2>&1 ||
     ! "$BUILD/tests/kernels_tests" --gtest_list_tests >> "$OUT/prebuilt-smoke.log" 2>&1; then
    note "prebuilt: smoke test failed, building instead: $(grep -m1 -iE 'error|not found|undefined' "$OUT/prebuilt-smoke.log")"
    rm -f build "$BUILD"
    return 1
  fi
  note "prebuilt: using $PREBUILT (revision $(sed -n 's/^git_revision=//p' $PREBUILT/STAMP), $(sed -n 's/^compiler=//p' $PREBUILT/STAMP))"
}

# TESTS as a gtest filter: "a|b\.c|d.*e" -> "*a*:*b.c*:*d*e*"; empty -> "*".
tests_as_gtest_filter() {
  [ -n "${TESTS:-}" ] || { echo '*'; return; }
  echo "$TESTS" | sed 's/\\\././g; s/\.\*/*/g' | tr '|' '\n' | sed 's/^/*/; s/$/*/' | paste -sd: -
}

prebuilt_tests() {
  local filter list results b
  filter=$(tests_as_gtest_filter)
  list=$OUT/prebuilt-tests.txt
  results=$OUT/prebuilt-results.txt
  : > "$list"
  for b in "$BUILD"/tests/*_tests; do
    "$b" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null |
      awk -v b="$(basename "$b")" '/^[^ ]/ {suite = $1} /^  [^ ]/ {print b, suite $1}' >> "$list"
  done
  # One line a test: "<status> <suite> <test>"; a failure's output follows its line.
  (cd build && ABLATE_DB='' xargs -r -a "$list" -P "${CTEST_JOBS:-4}" -L 1 sh -c '
     log=$(timeout 600 "tests/$0" --gtest_filter="$1" 2>&1); rc=$?
     if [ $rc = 0 ] && printf "%s\n" "$log" | grep -q "^\[  SKIPPED \] 1 test"; then s=Skipped
     elif [ $rc = 0 ]; then s=Passed; elif [ $rc = 124 ]; then s=Timeout; else s=Failed; fi
     if [ $s = Failed ] || [ $s = Timeout ]; then printf "%s %s %s\n%s\n" "$s" "$0" "$1" "$(printf "%s\n" "$log" | tail -60)"
     else printf "%s %s %s\n" "$s" "$0" "$1"; fi') > "$results" 2>&1
  local total passed skipped bad unaccounted
  total=$(wc -l < "$list")
  passed=$(grep -c '^Passed ' "$results")
  skipped=$(grep -c '^Skipped ' "$results")
  bad=$(grep -cE '^(Failed|Timeout) ' "$results")
  unaccounted=$((total - passed - skipped - bad))  # a test whose line never came: counted as failed
  bad=$((bad + unaccounted))
  {
    cat "$results"
    echo
    echo "filter $filter: $total tests, $passed passed, $skipped skipped, $bad failed ($unaccounted without a result)"
    if [ "$total" -gt 0 ] && [ "$bad" = 0 ]; then echo "100% tests passed, 0 tests failed out of $total"
    else echo "tests failed: $bad tests failed out of $total"; fi
  } > "$OUT/ctest.log"
  grep -E '^(Failed|Timeout) ' "$results" | head -20
}

ensure_gpu_build() {
  [ -x "$BUILD/ablate" ] && return 0
  if [ -f $PREBUILT/STAMP ]; then
    declare -F note > /dev/null || note() { echo "== $1"; }
    use_prebuilt && return 0
  fi
  echo "$(basename "$0"): $BUILD/ablate missing: run scripts/gpu-check.sh first (or carry .gpu-prebuilt)" >&2
  return 1
}

BASELINE_DIR=.gpu-baseline

use_baseline() {
  [ -f $BASELINE_DIR/STAMP ] && [ -f $BASELINE_DIR/tree.tar.xz ] ||
    { echo "$(basename "$0"): no $BASELINE_DIR carried: stage one with scripts/gpu-prebuilt.sh --baseline REV" >&2; return 1; }
  local root tree
  root=$(sed -n 's/^root=//p' $BASELINE_DIR/STAMP)
  [ -n "$root" ] || { echo "$(basename "$0"): $BASELINE_DIR/STAMP names no root" >&2; return 1; }
  # A tree staged for this root (gpu-prebuilt.sh --baseline-from-prebuilt) is unpacked beside and run
  # through a wrapper that puts its libraries before the RUNPATH's (the current build's).
  local override=0
  grep -q '^libraries=override$' $BASELINE_DIR/STAMP && override=1
  if [ $override = 1 ]; then tree=$PWD/$BASELINE_DIR/tree && rm -rf "$tree"; else tree=$root/build; fi
  mkdir -p "$tree" && tar xJf $BASELINE_DIR/tree.tar.xz -C "$tree" ||
    { echo "$(basename "$0"): could not unpack $BASELINE_DIR into $tree" >&2; return 1; }
  BASELINE_ABLATE=$tree/ablate
  if [ $override = 1 ]; then
    BASELINE_ABLATE=$tree/ablate-baseline
    printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%s/kernels${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s/ablate "$@"\n' \
      "$tree" "$tree" > "$BASELINE_ABLATE" && chmod +x "$BASELINE_ABLATE"
  fi
  link_torch_runpath_of "$tree"
  if ! "$BASELINE_ABLATE" catalog > "$OUT/baseline-smoke.log" 2>&1; then
    echo "$(basename "$0"): the baseline's smoke test failed: $(grep -m1 -iE 'error|not found|undefined' "$OUT/baseline-smoke.log")" >&2
    return 1
  fi
  BASELINE_TREE=$tree
  BASELINE_REVISION=$(sed -n 's/^git_revision=//p' $BASELINE_DIR/STAMP)
}
