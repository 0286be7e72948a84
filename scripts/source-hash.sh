#!/usr/bin/env bash
# scripts/source-hash.sh: one sha256 over every file that goes into the build (CMake files, C++/CUDA
# sources and headers under the source folders), path and content, in a fixed order. It needs no git:
# the GPU machine's copy of .git is stale, so this is how it tells that a prebuilt tree
# (scripts/gpu-prebuilt.sh) was built from exactly the sources it holds. Run from the repository root.
#   bash scripts/source-hash.sh        # prints 64 hex digits
set -euo pipefail
export LC_ALL=C
{
  ls CMakeLists.txt
  find cmake ablations base data harness kernels model profiling receipts report spec tests scripts \
    -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \
    -o -name 'CMakeLists.txt' -o -name '*.cmake' -o -name '*.in' \) 2>/dev/null
} | sort | while IFS= read -r f; do printf '%s\n' "$f"; sha256sum < "$f"; done | sha256sum | cut -c1-64
