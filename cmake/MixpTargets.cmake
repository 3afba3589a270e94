# Target discovery. Conventions (docs/architecture.md 6.6, kernels in tiers):
#  - src/**/X_avx512.cpp is compiled with the AVX-512 flags below, src/**/X_avx2.cpp with AVX2+F16C+FMA,
#    src/**/X_amx.cpp with the AMX tile flags;
#    everything else for the baseline x86-64 so the binary runs on any CPU; run-time dispatch picks.
#  - src/backend/cuda/ is skipped unless MIXP_CUDA is on (it has its own target).

set(MIXP_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mf16c -mfma -mavx2 -mbmi2)
set(MIXP_AVX2_FLAGS -mavx2 -mf16c -mfma -mbmi2)
# src/**/X_amx.cpp: the AMX tile instructions only (the tile peak loops, src/bench/peak_amx.cpp).
set(MIXP_AMX_FLAGS -mamx-tile -mamx-bf16 -mamx-int8)

function(mixp_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(MIXP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(MIXP_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

function(mixp_add_library)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/*.cpp")
  list(FILTER srcs EXCLUDE REGEX "/src/backend/cuda/")
  list(FILTER srcs EXCLUDE REGEX "/src/dist/nccl/")  # cmake/MixpCuda.cmake adds one of its two
  add_library(mixp SHARED ${srcs})
  add_library(mixp::mixp ALIAS mixp)
  target_include_directories(mixp
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(mixp PRIVATE DNNL::dnnl ZLIB::ZLIB nlohmann_json::nlohmann_json fmt::fmt OpenMP::OpenMP_CXX Threads::Threads MPI::MPI_CXX PkgConfig::SENTENCEPIECE)
  target_compile_definitions(mixp PRIVATE MIXP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  mixp_warnings(mixp)
  foreach(f IN LISTS srcs)
    if(f MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${MIXP_AVX512_FLAGS}")
    elseif(f MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${MIXP_AVX2_FLAGS}")
    elseif(f MATCHES "_amx\\.cpp$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${MIXP_AMX_FLAGS}")
    endif()
  endforeach()
  set_target_properties(mixp PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 0)
endfunction()

function(mixp_add_cli)
  file(GLOB srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tools/mixp/*.cpp")
  if(NOT srcs)
    return()
  endif()
  add_executable(mixp_cli ${srcs})
  set_target_properties(mixp_cli PROPERTIES OUTPUT_NAME mixp)
  target_include_directories(mixp_cli PRIVATE ${PROJECT_SOURCE_DIR}/tools/mixp)
  target_link_libraries(mixp_cli PRIVATE mixp CLI11::CLI11 nlohmann_json::nlohmann_json fmt::fmt)
  mixp_warnings(mixp_cli)
endfunction()

# One GoogleTest binary per folder under tests/ (tests/format -> mixp_test_format), each TEST
# registered with CTest. Tests see src/ too, for internal headers. MIXP_TEST_DATA points at
# tests/golden, MIXP_CLI at the built CLI for end-to-end tests.
function(mixp_add_tests)
  include(GoogleTest)
  file(GLOB dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/*")
  foreach(dir IN LISTS dirs)
    if(NOT IS_DIRECTORY ${dir})
      continue()
    endif()
    get_filename_component(name ${dir} NAME)
    if(EXISTS ${dir}/run_test.cmake)
      # A folder with its own driver script is a standalone scenario (e.g. tests/install: a
      # consumer project using find_package(mixp)), run by CMake in script mode.
      add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DMIXP_SOURCE_DIR=${PROJECT_SOURCE_DIR}
               -DMIXP_BINARY_DIR=${PROJECT_BINARY_DIR} -DMIXP_GENERATOR=${CMAKE_GENERATOR}
               -DMIXP_SANITIZE=${MIXP_SANITIZE} -P ${dir}/run_test.cmake)
      set_tests_properties(${name} PROPERTIES LABELS ${name} TIMEOUT 600)
      continue()
    endif()
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS "${dir}/*.cpp")
    if(NOT srcs)
      continue()
    endif()
    set(t mixp_test_${name})
    add_executable(${t} ${srcs})
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(${t} PRIVATE mixp GTest::gtest GTest::gtest_main GTest::gmock nlohmann_json::nlohmann_json fmt::fmt DNNL::dnnl ZLIB::ZLIB OpenMP::OpenMP_CXX)
    target_compile_definitions(${t} PRIVATE
      MIXP_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/golden"
      MIXP_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      MIXP_BINARY_DIR="${PROJECT_BINARY_DIR}")
    if(TARGET mixp_cli)
      add_dependencies(${t} mixp_cli)
      target_compile_definitions(${t} PRIVATE MIXP_CLI="$<TARGET_FILE:mixp_cli>")
    endif()
    mixp_warnings(${t})
    gtest_discover_tests(${t} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${name})
  endforeach()
endfunction()

function(mixp_add_benchmarks)
  file(GLOB srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/bench/*.cpp")
  foreach(f IN LISTS srcs)
    get_filename_component(name ${f} NAME_WE)
    add_executable(mixp_${name} ${f})
    target_include_directories(mixp_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(mixp_${name} PRIVATE mixp benchmark::benchmark DNNL::dnnl fmt::fmt OpenMP::OpenMP_CXX)
    mixp_warnings(mixp_${name})
  endforeach()
endfunction()

# An example whose source has a line `// ctest-args: ARGS` is also a CTest test (label `example`):
# the program run with ARGS (a short run) must exit with 0.
function(mixp_add_examples)
  file(GLOB srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/examples/*.cpp")
  foreach(f IN LISTS srcs)
    get_filename_component(name ${f} NAME_WE)
    add_executable(example_${name} ${f})
    target_link_libraries(example_${name} PRIVATE mixp)
    mixp_warnings(example_${name})
    file(STRINGS ${f} args_line REGEX "^// ctest-args:" LIMIT_COUNT 1)
    if(args_line)
      string(REGEX REPLACE "^// ctest-args:[ ]*" "" args "${args_line}")
      separate_arguments(args UNIX_COMMAND "${args}")
      add_test(NAME example_${name} COMMAND example_${name} ${args})
      set_tests_properties(example_${name} PROPERTIES LABELS example)
    endif()
  endforeach()
endfunction()
