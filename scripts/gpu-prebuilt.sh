#!/usr/bin/env bash
# scripts/gpu-prebuilt.sh: stages this machine's build (build/, Release, CUDA kernels for sm_90a, the
# same LibTorch 2.11.0+cu130 as the GPU machine) into .gpu-prebuilt/ (ignored), so a cold GPU machine
# skips its ~3-minute build: carry `.gpu-prebuilt` with `.gpu-deps`, and scripts/gpu-check.sh uses it
# when its stamp matches the sources it was sent (scripts/source-hash.sh; no git needed there) and a
# smoke test passes, else builds as before and says why (docs/gpu.md "Prebuilt binaries").
#   bash scripts/gpu-prebuilt.sh      # on the development machine, after the commit you will send
# Stages: ablate, every test and benchmark program, libablate_kernels.so, and the runtime libraries the
# binaries take from this machine (libcudart, libcupti, Google Benchmark) beside it (the binaries'
# RUNPATH names $PWD/build/kernels; gpu-check.sh links build -> .gpu-prebuilt there).
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's own build (Makefile: installs what is missing, configures Release, ccache), then checks.
make -s build > /dev/null || { echo "gpu-prebuilt: 'make build' failed" >&2; exit 1; }
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' build/CMakeCache.txt ||
  { echo "gpu-prebuilt: build/ is not a Release build" >&2; exit 2; }
grep -q '^CMAKE_CUDA_COMPILER:STRING=.*nvcc' build/CMakeCache.txt ||
  { echo "gpu-prebuilt: build/ was configured without nvcc: the CUDA kernels are not in it" >&2; exit 2; }

out=.gpu-prebuilt
rm -rf "$out.tmp" && mkdir -p "$out.tmp"/{tests,bench,kernels}
cp build/ablate "$out.tmp/"
for f in build/tests/* build/bench/*; do
  [ -f "$f" ] && [ -x "$f" ] && cp "$f" "$out.tmp/${f#build/}"
done
cp build/kernels/*.so "$out.tmp/kernels/"
# Runtime libraries resolved from this machine's paths: copied under their soname so the copies win
# through RUNPATH wherever the GPU machine keeps its own.
for lib in libcudart.so libcupti.so libbenchmark.so; do
  path=$(ldd "$out.tmp/ablate" "$out.tmp"/bench/* 2>/dev/null |
         awk -v l="$lib" 'index($1, l) == 1 && $3 ~ /^\// && !found {print $1, $3; found = 1}')
  [ -n "$path" ] && cp -L "${path#* }" "$out.tmp/kernels/${path%% *}"
done
{
  echo "source_hash=$(bash scripts/source-hash.sh)"
  echo "root=$PWD"
  echo "git_revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "git_dirty=$(test -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" && echo false || echo true)"
  echo "compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/CMakeCache.txt) $(c++ -dumpfullversion 2>/dev/null)"
  echo "staged=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out.tmp/STAMP"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "gpu-prebuilt: $(du -sh "$out" | cut -f1) in $out ($(find "$out" -type f | wc -l) files); carry it: [\".gpu-deps\", \".gpu-prebuilt\"]"
cat "$out/STAMP"
