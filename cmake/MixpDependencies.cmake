# Every dependency is a Debian package installed by scripts/bootstrap.sh; nothing is vendored.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(dnnl CONFIG REQUIRED)          # libdnnl-dev: CPU GEMM/conv
find_package(ZLIB REQUIRED)                 # zlib1g-dev: gzip'd IDX files
find_package(nlohmann_json CONFIG REQUIRED) # nlohmann-json3-dev: safetensors headers, JSON output
find_package(fmt CONFIG REQUIRED)           # libfmt-dev
find_package(CLI11 CONFIG REQUIRED)         # libcli11-dev: the CLI
# libopenmpi-dev: data parallelism (src/dist). The C API through the C++ compiler; no MPI C++
# bindings (deprecated since MPI 2.2).
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)
# libsentencepiece-dev: `mixp tokenize` (src/data/tokenizer.cpp). Required, not optional: bootstrap
# installs it with the rest, and a mixp that cannot turn text into tokens would need a second
# code path and a "built without SentencePiece" error for one small library (docs/data.md).
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
if(MIXP_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)       # libgtest-dev
endif()
if(MIXP_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)   # libbenchmark-dev
endif()
