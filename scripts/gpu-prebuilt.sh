#!/usr/bin/env bash
# scripts/gpu-prebuilt.sh: stages this machine's build (build/, Release, CUDA kernels for sm_90a, the
# same LibTorch 2.11.0+cu130 as the GPU machine) into .gpu-prebuilt/ (ignored), so a cold GPU machine
# skips its ~3-minute build: carry `.gpu-prebuilt` with `.gpu-deps`, and scripts/gpu-check.sh uses it
# when its stamp matches the sources it was sent (scripts/source-hash.sh; no git needed there) and a
# smoke test passes, else builds as before and says why (docs/gpu.md "Prebuilt binaries").
#   bash scripts/gpu-prebuilt.sh      # on the development machine, after the commit you will send
# Stages: ablate and ablate-train, every test and benchmark program, libablate_kernels.so, and the
# runtime libraries the binaries take from this machine (libcudart, libcupti, Google Benchmark) beside
# it, as one xz archive .gpu-prebuilt/tree.tar.xz (~10 MB) with a STAMP (the binaries' RUNPATH names
# $PWD/build/kernels; gpu-check.sh unpacks the tree into .gpu-prebuilt/tree and links build -> it there).
#
#   bash scripts/gpu-prebuilt.sh --baseline REV
# A baseline for an A/B across revisions (docs/gpu.md "A/B across revisions"): builds REV in a git
# worktree beside the repository (../ablate-baseline-<12 hex>, ccache shares what did not change) and
# stages its ablate (with ablate-train, where REV has it) and kernels into .gpu-baseline/tree.tar.xz
# (~5 MB) with a STAMP; carried, it lets scripts/gpu-ab.sh run side A on REV's binary and side B on the
# current one, interleaved.
#
#   bash scripts/gpu-prebuilt.sh --baseline-from-prebuilt
# The same baseline without a build: the tree staged last (the revision before the change, still in
# .gpu-prebuilt) kept as .gpu-baseline, with every test and benchmark program in it (~13 MB); then
# commit the change and stage it as usual. On the GPU machine use_baseline runs it with its own
# libraries first on LD_LIBRARY_PATH (they win over RUNPATH), so its kernels_bench can run interleaved
# with the current one too ($BASELINE_TREE).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: gpu-prebuilt.sh [--baseline REV | --baseline-from-prebuilt]"
root=$PWD out=.gpu-prebuilt baseline=0
case "$#:${1:-}" in
  0:) ;;
  2:--baseline)
    rev=$(git rev-parse --verify --quiet "$2^{commit}") ||
      { echo "gpu-prebuilt: '$2' is not a commit of this repository: give a revision git knows (git log --oneline)" >&2; exit 2; } ;;
  1:--baseline-from-prebuilt)
    # The staged tree of the revision before (what the last call ran) kept as the baseline, before this
    # revision is staged over it: no worktree build. Its binaries' RUNPATH names the current build's
    # libraries, so use_baseline puts its own first on LD_LIBRARY_PATH (STAMP: libraries=override).
    [ -f .gpu-prebuilt/STAMP ] && [ -f .gpu-prebuilt/tree.tar.xz ] ||
      { echo "gpu-prebuilt: no staged .gpu-prebuilt to keep as the baseline: stage one first (bash scripts/gpu-prebuilt.sh)" >&2; exit 2; }
    rm -rf .gpu-baseline && mkdir -p .gpu-baseline && cp .gpu-prebuilt/tree.tar.xz .gpu-baseline/
    { grep -v '^source_hash=' .gpu-prebuilt/STAMP; echo "libraries=override"; } > .gpu-baseline/STAMP
    echo "gpu-prebuilt: .gpu-baseline holds the staged tree of $(sed -n 's/^git_revision=//p' .gpu-baseline/STAMP) (carry it with .gpu-deps and .gpu-prebuilt)"
    exit 0 ;;
  *) echo "gpu-prebuilt: unexpected arguments '$*'; $usage" >&2; exit 2 ;;
esac
if [ $# = 2 ]; then
  root=$(cd .. && pwd)/ablate-baseline-${rev:0:12} out=.gpu-baseline baseline=1
  [ -d "$root" ] || git worktree add --detach "$root" "$rev" > /dev/null
  [ "$(git -C "$root" rev-parse HEAD)" = "$rev" ] ||
    { echo "gpu-prebuilt: $root is at $(git -C "$root" rev-parse HEAD), not $rev: remove it (git worktree remove)" >&2; exit 2; }
fi

# The project's own build (Makefile: installs what is missing, configures Release, ccache), then checks.
# A baseline stages only ablate and the kernels library: it builds just those two targets, and with them
# ablate-train where REV has it (the test and benchmark programs are most of a full build, ~40 minutes on
# 2 cores when the cache misses).
if [ $baseline = 1 ]; then
  { make -s -C "$root" build/build.ninja > /dev/null && cmake --build "$root/build" --target ablate ablate_kernels > /dev/null; } ||
    { echo "gpu-prebuilt: building ablate and ablate_kernels failed in $root" >&2; exit 1; }
else
  make -s -C "$root" build > /dev/null || { echo "gpu-prebuilt: 'make build' failed in $root" >&2; exit 1; }
fi
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$root/build/CMakeCache.txt" ||
  { echo "gpu-prebuilt: $root/build is not a Release build" >&2; exit 2; }
grep -q '^CMAKE_CUDA_COMPILER:STRING=.*nvcc' "$root/build/CMakeCache.txt" ||
  { echo "gpu-prebuilt: $root/build was configured without nvcc: the CUDA kernels are not in it" >&2; exit 2; }

staged=$out.tmp
rm -rf "$staged" && mkdir -p "$staged"/{tests,bench,kernels}
cp "$root/build/ablate" "$staged/"
# ablate runs training in ablate-train beside it (harness/cli/hand_off.cpp); a REV before that split has none.
[ ! -f "$root/build/ablate-train" ] || cp "$root/build/ablate-train" "$staged/"
if [ $baseline = 0 ]; then
  for f in "$root"/build/tests/* "$root"/build/bench/*; do
    [ -f "$f" ] && [ -x "$f" ] && cp "$f" "$staged/${f#"$root"/build/}"
  done
fi
cp "$root"/build/kernels/*.so "$staged/kernels/"
# Runtime libraries resolved from this machine's paths: copied under their soname so the copies win
# through RUNPATH wherever the GPU machine keeps its own.
for lib in libcudart.so libcupti.so libbenchmark.so; do
  path=$({ ldd "$staged"/ablate* $(find "$staged/bench" -type f) 2>/dev/null || true; } |
         awk -v l="$lib" 'index($1, l) == 1 && $3 ~ /^\// && !found {print $1, $3; found = 1}')
  [ -n "$path" ] && cp -L "${path#* }" "$staged/kernels/${path%% *}"
done
stamp() {
  [ $baseline = 1 ] || echo "source_hash=$(bash scripts/source-hash.sh)"
  echo "root=$root"
  echo "git_revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "git_dirty=$(test -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" && echo false || echo true)"
  echo "compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$root/build/CMakeCache.txt") $(c++ -dumpfullversion 2>/dev/null)"
  echo "staged=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
# One xz archive beside the STAMP (~10 MB for the full tree against ~40 unpacked, ~5 MB for a baseline):
# the device call's carry is limited to 64 MiB. The GPU machine unpacks it where the binaries' RUNPATH
# expects them (.gpu-prebuilt/tree linked as build/, or <root>/build for a baseline).
[ $baseline = 0 ] || rm -rf "$staged"/{tests,bench}
rm -rf "$out.next" && mkdir -p "$out.next"
tar cf - -C "$staged" . | xz -T0 -6 > "$out.next/tree.tar.xz"
stamp > "$out.next/STAMP"
rm -rf "$staged" "$out" && mv "$out.next" "$out"
echo "gpu-prebuilt: $(du -sh "$out" | cut -f1) in $out ($(find "$out" -type f | wc -l) files); carry it with .gpu-deps"
cat "$out/STAMP"
