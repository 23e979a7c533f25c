# Helpers shared by every module's CMakeLists.txt.

# mnemo_add_library(NAME SOURCES ... HEADERS ... DEPS ...): a static library for one module
# (docs/design.md §2). HEADERS: the public headers of include/mnemo/ this module owns (what an
# embedding program includes as "mnemo/x.h"); every other header of the module sits beside its
# sources in src/<module>/ and is included as "<module>/x.h".
#
# The include path enforces the design's direction: a library sees no include/ or src/ root but
# one folder of its own in the build tree, with links to its own public headers (mnemo/...) and
# to its own folder (<module>/...), exposed PUBLIC, so it and what links it see exactly the
# headers of the modules they link. An include against the direction fails to compile.
function(mnemo_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;HEADERS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  get_filename_component(module ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set(root ${PROJECT_BINARY_DIR}/include_roots/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/mnemo)
  file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${module} SYMBOLIC)
  foreach(header ${ARG_HEADERS})
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/mnemo/${header})
      message(FATAL_ERROR "${name}: no public header include/mnemo/${header}")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/mnemo/${header} ${root}/mnemo/${header}
         SYMBOLIC)
  endforeach()
  target_include_directories(${name} PUBLIC ${root})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# mnemo_add_test(NAME SOURCES ... DEPS ...): a GoogleTest binary registered with ctest.
function(mnemo_add_test name)
  if(NOT MNEMO_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "MNEMO_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# mnemo_add_simd_variants(NAME TARGETS ...): runs test binary NAME once more per SIMD target
# (MNEMO_SIMD=TARGET, kernels.h set_simd_cap), as tests named "<test>@TARGET". A variant skips
# itself where the CPU lacks the target or where it is the CPU's best (the plain run covers that):
# a machine tests every path it can run, e.g. an AVX-512 machine its AVX2 and SSE4 paths too.
function(mnemo_add_simd_variants name)
  if(NOT MNEMO_BUILD_TESTS OR NOT TARGET ${name})
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "TARGETS" ${ARGN})
  target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/tools/simd_variant.cc)
  foreach(simd ${ARG_TARGETS})
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_SUFFIX "@${simd}"
      PROPERTIES ENVIRONMENT "MNEMO_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
                 ENVIRONMENT_MODIFICATION "MNEMO_SIMD=set:${simd}"
                 SKIP_REGULAR_EXPRESSION "this CPU has no|the plain run covers it")
  endforeach()
endfunction()

# mnemo_add_bench(NAME SOURCES ... DEPS ...): a Google Benchmark binary (not run by ctest).
function(mnemo_add_bench name)
  if(NOT MNEMO_BUILD_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
