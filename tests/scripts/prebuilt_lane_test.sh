#!/usr/bin/env bash
# tests/scripts/prebuilt_lane_test.sh: the GPU machine's prebuilt lane (scripts/gpu-prebuilt-lane.sh,
# sourced by scripts/gpu-check.sh) checked here, where it never runs otherwise: the source hash is stable
# and moves with a source edit but not a doc edit; the lane refuses (and says why) a missing stamp,
# other sources, another path, a real build/ and a TESTS regex richer than names joined by |; it accepts
# a matching stamp; ensure_gpu_build links a carried prebuilt again (and refuses without one);
# use_baseline unpacks a carried baseline where its RUNPATH expects it, refuses one that fails its smoke
# test or is missing, and runs one kept from an earlier prebuilt with its own libraries first; TESTS becomes the gtest filter it should. Runs in a scratch copy of the scripts and a
# few sources. Exit 0 passed, 1 a check failed.
#   bash tests/scripts/prebuilt_lane_test.sh     (ctest: prebuilt_lane)
source "$(dirname "$0")/checks.sh"

mkdir -p "$work/tree/scripts" "$work/tree/kernels" "$work/tree/docs"
cp "$src/scripts/source-hash.sh" "$src/scripts/gpu-prebuilt-lane.sh" "$src/scripts/gpu-prebuilt.sh" "$work/tree/scripts/"
cp "$src/CMakeLists.txt" "$work/tree/"
echo 'int f() { return 1; }' > "$work/tree/kernels/a.cpp"
echo 'notes' > "$work/tree/docs/a.md"
cd "$work/tree"

# The hash: stable, moved by a source edit, not by a doc edit.
h1=$(bash scripts/source-hash.sh)
check "hash is 64 hex digits" 64 "$(printf %s "$h1" | tr -cd '0-9a-f' | wc -c)"
check "hash is stable" "$h1" "$(bash scripts/source-hash.sh)"
echo 'more notes' >> docs/a.md
check "a doc edit keeps the hash" "$h1" "$(bash scripts/source-hash.sh)"
echo '// edit' >> kernels/a.cpp
h2=$(bash scripts/source-hash.sh)
[ "$h1" != "$h2" ] && echo "ok   a source edit moves the hash" || { echo "FAIL a source edit kept the hash"; failures=$((failures + 1)); }

BUILD=build-gpu
OUT=$work/out
mkdir -p "$OUT"
note() { :; }
source scripts/gpu-prebuilt-lane.sh

# A staged tree as scripts/gpu-prebuilt.sh leaves it: STAMP and tree.tar.xz (fake binaries that print
# what the smoke test wants).
pack_fake_tree() {  # pack_fake_tree DIR EXIT_STATUS_OF_ITS_ABLATE: DIR/tree.tar.xz
  rm -rf "$work/staged" && mkdir -p "$work/staged/kernels" "$work/staged/tests" "$1"
  printf '#!/bin/sh\n[ "$1" = libs ] && { echo "${LD_LIBRARY_PATH%%%%:*}"; exit 0; }\necho catalog\nexit %s\n' "$2" \
    > "$work/staged/ablate"
  printf '#!/bin/sh\necho Suite.\n' > "$work/staged/tests/kernels_tests"
  chmod +x "$work/staged/ablate" "$work/staged/tests/kernels_tests"
  tar cf - -C "$work/staged" . | xz > "$1/tree.tar.xz"
}

contains "no stamp is refused" "none carried" "$(prebuilt_refusal)"
mkdir -p .gpu-prebuilt
printf 'source_hash=%s\nroot=%s\n' "$h2" "$PWD" > .gpu-prebuilt/STAMP
contains "a stamp without its tree.tar.xz is refused" "none carried" "$(prebuilt_refusal)"
pack_fake_tree .gpu-prebuilt 0
printf 'source_hash=%s\nroot=%s\n' "$h1" "$PWD" > .gpu-prebuilt/STAMP
contains "other sources are refused" "other sources" "$(prebuilt_refusal)"
printf 'source_hash=%s\nroot=/elsewhere\n' "$h2" > .gpu-prebuilt/STAMP
contains "another path is refused" "another path" "$(prebuilt_refusal)"
printf 'source_hash=%s\nroot=%s\n' "$h2" "$PWD" > .gpu-prebuilt/STAMP
check "a matching stamp is accepted" "" "$(prebuilt_refusal)"
mkdir build && contains "a real build/ is refused" "real build" "$(prebuilt_refusal)" && rmdir build
ln -s .gpu-prebuilt build && check "a link build/ is accepted" "" "$(prebuilt_refusal)" && rm build
contains "a rich TESTS regex is refused" "more than names" "$(TESTS='a(b)|c' prebuilt_refusal)"
check "TESTS=none is accepted" "" "$(TESTS=none prebuilt_refusal)"
contains "PREBUILT_OFF=1 is refused" "PREBUILT_OFF" "$(PREBUILT_OFF=1 prebuilt_refusal)"

# ensure_gpu_build (gpu-matrix.sh, gpu-ab.sh): the device's tree sync drops the links between calls;
# the carried tree is unpacked into .gpu-prebuilt/tree and linked as both builds.
export TORCH_LIB=$work/torch-lib
ensure_gpu_build 2> /dev/null
check "ensure_gpu_build links a carried prebuilt, unpacked" ".gpu-prebuilt/tree .gpu-prebuilt/tree" \
  "$(readlink build) $(readlink $BUILD)"
check "... whose binaries run" "catalog Suite." "$(build/ablate) $(build/tests/kernels_tests)"
check "ensure_gpu_build keeps a build in place" "0" "$(ensure_gpu_build 2> /dev/null; echo $?)"
rm -f build $BUILD && pack_fake_tree .gpu-prebuilt 1
contains "a prebuilt whose smoke test fails is not used" "rc 1" "$(ensure_gpu_build 2>&1; echo "rc $?")"
check "... and leaves no links" "" "$(ls -d build $BUILD 2> /dev/null)"
rm -f build $BUILD && rm -rf .gpu-prebuilt
contains "ensure_gpu_build without a build or a prebuilt says what to run" "run scripts/gpu-check.sh first" \
  "$(ensure_gpu_build 2>&1; echo "rc $?")"
contains "... and fails" "rc 1" "$(ensure_gpu_build 2>&1; echo "rc $?")"

# use_baseline (gpu-ab.sh BASELINE=1): the baseline's binaries unpacked where their RUNPATH expects them.
base_root=$work/ablate-baseline-0123456789ab
revision=0123456789abcdef0123456789abcdef01234567
make_baseline() {  # make_baseline EXIT_STATUS_OF_ITS_ABLATE
  rm -rf .gpu-baseline "$base_root" && pack_fake_tree .gpu-baseline "$1"
  printf 'root=%s\ngit_revision=%s\n' "$base_root" "$revision" > .gpu-baseline/STAMP
}
make_baseline 0
use_baseline 2> /dev/null
check "use_baseline unpacks into the root's build/" "$base_root/build/ablate" "${BASELINE_ABLATE:-}"
check "... a runnable binary" "catalog" "$("$base_root/build/ablate" | head -1)"
check "... with its revision" "$revision" "${BASELINE_REVISION:-}"
make_baseline 1
contains "a baseline whose smoke test fails is refused" "smoke test failed" "$(use_baseline 2>&1; echo "rc $?")"
contains "... with rc 1" "rc 1" "$(use_baseline 2>&1; echo "rc $?")"
rm -rf .gpu-baseline
contains "without one it says how to stage one" "gpu-prebuilt.sh --baseline REV" "$(use_baseline 2>&1; echo "rc $?")"

# A baseline kept from the prebuilt staged last (gpu-prebuilt.sh --baseline-from-prebuilt): its tree and
# stamp copied, marked for a library override; use_baseline unpacks it into .gpu-baseline/tree and runs it
# through a wrapper that puts its libraries before the RUNPATH's (the current build's).
contains "--baseline-from-prebuilt without a staged tree says what to run" "stage one first" \
  "$(bash scripts/gpu-prebuilt.sh --baseline-from-prebuilt 2>&1; echo "rc $?")"
check "... and exits 2" "2" "$(bash scripts/gpu-prebuilt.sh --baseline-from-prebuilt > /dev/null 2>&1; echo $?)"
pack_fake_tree .gpu-prebuilt 0
printf 'source_hash=%s\nroot=%s\ngit_revision=%s\n' "$h2" "$PWD" "$revision" > .gpu-prebuilt/STAMP
bash scripts/gpu-prebuilt.sh --baseline-from-prebuilt > /dev/null
check "--baseline-from-prebuilt keeps the staged tree" "$(xz -dc .gpu-prebuilt/tree.tar.xz | md5sum)" \
  "$(xz -dc .gpu-baseline/tree.tar.xz | md5sum)"
check "... with its stamp, no source hash, a library override" "root=$PWD git_revision=$revision libraries=override" \
  "$(tr '\n' ' ' < .gpu-baseline/STAMP | sed 's/ $//')"
use_baseline 2> /dev/null
check "use_baseline runs a kept prebuilt through its wrapper" "$PWD/.gpu-baseline/tree/ablate-baseline" "${BASELINE_ABLATE:-}"
check "... from its own tree" "$PWD/.gpu-baseline/tree" "${BASELINE_TREE:-}"
check "... its libraries first on LD_LIBRARY_PATH" "$PWD/.gpu-baseline/tree/kernels" "$(LD_LIBRARY_PATH=/x "$BASELINE_ABLATE" libs)"
check "... with its revision" "$revision" "${BASELINE_REVISION:-}"
rm -rf .gpu-baseline .gpu-prebuilt

# TESTS as a gtest filter.
check "no TESTS: every test" '*' "$(TESTS='' tests_as_gtest_filter)"
check "names joined by |" '*Catalog.*:*Names*:*ssm_rotary*' "$(TESTS='Catalog\.|Names|ssm_rotary' tests_as_gtest_filter)"
check ".* inside a name" '*Parity*ssm*' "$(TESTS='Parity.*ssm' tests_as_gtest_filter)"

finish "prebuilt lane"
