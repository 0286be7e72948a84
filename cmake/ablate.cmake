# Helpers shared by the per-folder CMakeLists: a folder's sources are globbed, so adding a file
# needs no CMake edit; `*_bench.cpp` files become Google Benchmark programs, `*_test.cpp` GoogleTest suites.

# ablate_glob(OUT DIR [RECURSE]) : the .cpp files of DIR that are neither tests nor benchmarks.
function(ablate_glob out dir)
  file(GLOB _all CONFIGURE_DEPENDS ${dir}/*.cpp)
  list(FILTER _all EXCLUDE REGEX "_(bench|test)\\.cpp$")
  set(${out} ${_all} PARENT_SCOPE)
endfunction()

function(ablate_common_target target)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

# ablate_benchmarks(DIR LIBS...) : one Google Benchmark executable per DIR/*_bench.cpp.
function(ablate_benchmarks dir)
  if(NOT ABLATE_BUILD_BENCHMARKS)
    return()
  endif()
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    return()
  endif()
  file(GLOB _benches CONFIGURE_DEPENDS ${dir}/*_bench.cpp)
  foreach(_b ${_benches})
    get_filename_component(_name ${_b} NAME_WE)
    add_executable(${_name} ${_b})
    ablate_common_target(${_name})
    target_link_libraries(${_name} PRIVATE ${ARGN} benchmark::benchmark)
    set_target_properties(${_name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
  endforeach()
endfunction()

# ablate_test_suite(NAME DIR LIBS...) : one GoogleTest executable from DIR/*_test.cpp, tests discovered by ctest.
function(ablate_test_suite name dir)
  file(GLOB _tests CONFIGURE_DEPENDS ${dir}/*_test.cpp)
  if(NOT _tests)
    return()
  endif()
  add_executable(${name} ${_tests})
  ablate_common_target(${name})
  target_link_libraries(${name} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE ABLATE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                              ABLATE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  # DISCOVERY_TIMEOUT: listing the tests loads LibTorch, which on a cold 2-core machine (page cache
  # empty, other builds running) takes far longer than CMake's default 5 s; a timed-out listing fails
  # the first `make test` of a fresh clone. 300 s bounds a hung binary and never trips on a slow one.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 300 WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
                       PROPERTIES ENVIRONMENT "ABLATE_DB=" TIMEOUT 600)
endfunction()

# ablate_require_plain(TARGETS...) : fails the configure when one of TARGETS links LibTorch, directly or
# through any library it links, so the folders docs/architecture.md calls plain C++ stay plain (they
# build in seconds and run where LibTorch is not installed). Call it once every target exists.
function(ablate_require_plain)
  foreach(_root ${ARGN})
    set(_seen "")
    set(_todo ${_root})
    while(_todo)
      list(POP_FRONT _todo _item)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _item "${_item}")
      if(_item IN_LIST _seen)
        continue()
      endif()
      list(APPEND _seen ${_item})
      if(_item MATCHES "(^|/)(lib)?(torch|c10)([_.]|$)")
        message(FATAL_ERROR "${_root} is documented as plain C++ but links LibTorch (${_item}); move what "
                            "needs LibTorch out of it (docs/architecture.md \"Folders\")")
      endif()
      if(TARGET ${_item})
        get_target_property(_aliased ${_item} ALIASED_TARGET)
        if(_aliased)
          list(APPEND _todo ${_aliased})
          continue()
        endif()
        get_target_property(_direct ${_item} LINK_LIBRARIES)
        get_target_property(_interface ${_item} INTERFACE_LINK_LIBRARIES)
        foreach(_list _direct _interface)
          if(${_list})
            list(APPEND _todo ${${_list}})
          endif()
        endforeach()
      endif()
    endwhile()
  endforeach()
endfunction()
