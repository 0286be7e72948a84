#!/usr/bin/env bash
# tests/scripts/plain_layers_test.sh: ablate_require_plain (cmake/ablate.cmake), the configure-time check
# that no library docs/architecture.md calls plain C++ links LibTorch, on small CMake projects: a library
# reaching c10 through another, one linking a libtorch_cpu.so path, one behind $<LINK_ONLY:...>, are
# refused naming the library and what it links; a plain one passes. Exit 0 passed, 1 a check failed.
#   bash tests/scripts/plain_layers_test.sh     (ctest: plain_layers)
source "$(dirname "$0")/checks.sh"

configure() {  # configure CASE: the output of configuring a project whose target `layer` links CASE's deps
  local dir=$work/$1
  mkdir -p "$dir"
  cat > "$dir/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(plain_layers NONE)
include($src/cmake/ablate.cmake)
add_library(c10 INTERFACE)
add_library(middle INTERFACE)
add_library(plain_dep INTERFACE)
add_library(layer INTERFACE)
if("$1" STREQUAL "through_another")
  target_link_libraries(middle INTERFACE c10)
  target_link_libraries(layer INTERFACE plain_dep middle)
elseif("$1" STREQUAL "by_path")
  target_link_libraries(layer INTERFACE /opt/venv/torch/lib/libtorch_cpu.so)
elseif("$1" STREQUAL "link_only")
  target_link_libraries(layer INTERFACE "\\\$<LINK_ONLY:c10>")
else()
  target_link_libraries(middle INTERFACE plain_dep)
  target_link_libraries(layer INTERFACE middle)
endif()
ablate_require_plain(layer)
CMAKE
  cmake -S "$dir" -B "$dir/build" 2>&1 | tr -s " \n" "  "  # CMake wraps long messages
  echo "status ${PIPESTATUS[0]}"
}

out=$(configure through_another)
contains "refused through another library" "layer is documented as plain C++ but links LibTorch (c10)" "$out"
contains "the configure fails" "status 1" "$out"
out=$(configure by_path)
contains "refused by path" "links LibTorch (/opt/venv/torch/lib/libtorch_cpu.so)" "$out"
out=$(configure link_only)
contains "refused behind LINK_ONLY" "links LibTorch (c10)" "$out"
out=$(configure plain)
contains "a plain library passes" "status 0" "$out"
finish plain_layers
