# The CUDA backend (docs/cuda.md). MIXP_CUDA=AUTO builds it when nvcc and the CUDA toolkit are
# found (and says which), ON requires them, OFF never builds it. Without it, libmixp compiles
# src/backend/cuda/off/ instead: the same entry points, saying that CUDA is not built.
#
# Layout: src/backend/cuda/*.cu (kernels, nvcc) and src/backend/cuda/*.cpp (host code: memory,
# streams, cuBLASLt, the Backend) form one OBJECT library, mixp_cuda, whose objects go into
# libmixp. It is a target of its own so that the CUDA include directories and flags reach only
# these files: every other libmixp source keeps its exact command line (and its ccache entries).
# libcudart is linked by full path for the same reason; the build tree's RPATH then names
# /usr/local/cuda/lib64 (or wherever the toolkit is), so binaries run from the build tree.
# libcublasLt is not linked: src/backend/cuda/cublaslt_api.cpp loads it on first use.
# The math of each kernel is in src/backend/cuda/math/*.h, plain C++ as well as CUDA, so
# tests/cuda checks it on the CPU in every build (docs/cuda.md, "What is tested where").

set(MIXP_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when the toolkit is found), ON (required), OFF")
set_property(CACHE MIXP_CUDA PROPERTY STRINGS AUTO ON OFF)
# sm_80 (A100), sm_89 (L4/L40, Ada: FP8), sm_90 (H100: FP8). Each architecture adds compile time:
# CI builds this on every run, so the list is kept to the GPUs the issue names.
set(MIXP_CUDA_ARCHITECTURES "80;89;90" CACHE STRING "GPU architectures the CUDA backend is compiled for")
# The NCCL process group (src/dist/nccl/, docs/distributed.md): AUTO builds it with the CUDA
# backend when nccl.h is found, ON requires it, OFF never builds it. Only the header is needed at
# build time: libnccl.so.2 (200+ MB) is loaded with dlopen when a group is made, never linked.
set(MIXP_NCCL AUTO CACHE STRING "Build the NCCL process group: AUTO (when nccl.h is found), ON (required), OFF")
set_property(CACHE MIXP_NCCL PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${MIXP_NCCL}" _mixp_nccl_mode)
if(NOT _mixp_nccl_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "MIXP_NCCL must be AUTO, ON or OFF (got '${MIXP_NCCL}')")
endif()
file(GLOB _mixp_nccl_off CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/dist/nccl/off/*.cpp")

string(TOUPPER "${MIXP_CUDA}" _mixp_cuda_mode)
if(NOT _mixp_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "MIXP_CUDA must be AUTO, ON or OFF (got '${MIXP_CUDA}')")
endif()

set(MIXP_CUDA_ENABLED OFF)
set(_mixp_cuda_why "MIXP_CUDA=OFF")
if(NOT _mixp_cuda_mode STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(MIXP_NVCC nvcc HINTS ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
    if(MIXP_NVCC)
      set(ENV{CUDACXX} "${MIXP_NVCC}")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
      # The toolkit that nvcc belongs to (FindCUDAToolkit looks on PATH otherwise).
      get_filename_component(_mixp_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
      get_filename_component(CUDAToolkit_ROOT "${_mixp_nvcc_dir}/.." ABSOLUTE)
    endif()
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::cublasLt)
      set(MIXP_CUDA_ENABLED ON)
    else()
      set(_mixp_cuda_why "nvcc found at ${CMAKE_CUDA_COMPILER} but not the toolkit's cudart/cublasLt")
    endif()
  else()
    set(_mixp_cuda_why "no CUDA compiler (nvcc) found; set CUDACXX or put nvcc on PATH")
  endif()
endif()

if(_mixp_cuda_mode STREQUAL "ON" AND NOT MIXP_CUDA_ENABLED)
  message(FATAL_ERROR "MIXP_CUDA=ON but the CUDA backend cannot be built: ${_mixp_cuda_why}")
endif()

if(NOT MIXP_CUDA_ENABLED)
  message(STATUS "mixp: CUDA backend not built (${_mixp_cuda_why})")
  file(GLOB _mixp_cuda_off CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/backend/cuda/off/*.cpp")
  target_sources(mixp PRIVATE ${_mixp_cuda_off})
  if(_mixp_nccl_mode STREQUAL "ON")
    message(FATAL_ERROR "MIXP_NCCL=ON needs the CUDA backend, which is not built (${_mixp_cuda_why})")
  endif()
  target_sources(mixp PRIVATE ${_mixp_nccl_off})
  return()
endif()

set(CMAKE_CUDA_ARCHITECTURES "${MIXP_CUDA_ARCHITECTURES}")
enable_language(CUDA)
# C++17: the .cu files need no more, and CMake 3.25 knows no C++20 flag for nvcc.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
if(MIXP_USE_CCACHE AND MIXP_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${MIXP_CCACHE}")
endif()
message(STATUS "mixp: CUDA backend built (CUDA ${CUDAToolkit_VERSION}, nvcc ${CMAKE_CUDA_COMPILER}, sm ${MIXP_CUDA_ARCHITECTURES})")

file(GLOB _mixp_cuda_srcs CONFIGURE_DEPENDS
     "${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu" "${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp")
add_library(mixp_cuda OBJECT ${_mixp_cuda_srcs})
set_target_properties(mixp_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON
                      CUDA_ARCHITECTURES "${MIXP_CUDA_ARCHITECTURES}")
target_include_directories(mixp_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(mixp_cuda PRIVATE CUDA::cudart CUDA::cublasLt fmt::fmt)
string(REPLACE ";" "," _mixp_cuda_archs "${MIXP_CUDA_ARCHITECTURES}")
# cuBLASLt is not linked but loaded on first use (src/backend/cuda/cublaslt_api.h: mapping it
# costs every process about 0.35 s): by its versioned name in the folder the toolkit's CMake
# package found it in, else by that name through the loader's search path.
get_filename_component(_mixp_cublaslt_dir "${CUDA_cublasLt_LIBRARY}" DIRECTORY)
set(_mixp_cublaslt_soname "libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}")
target_compile_definitions(mixp_cuda PRIVATE
  MIXP_CUDA_VERSION="${CUDAToolkit_VERSION}" MIXP_CUDA_ARCHS="${_mixp_cuda_archs}"
  MIXP_CUBLASLT_PATH="${_mixp_cublaslt_dir}/${_mixp_cublaslt_soname}"
  MIXP_CUBLASLT_SONAME="${_mixp_cublaslt_soname}")
target_compile_options(mixp_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr --fmad=false>)
# --fmad=false: no a*b+c contraction into FMA, so that the element rules of math/*.h round as
# they do on the CPU (a GPU optimizer step equals a CPU one bit for bit; math/step_math.h).
if(MIXP_WERROR)
  target_compile_options(mixp_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                         $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()

# NCCL: its header with the CUDA toolkit's (or NCCL_ROOT / NCCL_HOME); no library linked.
set(_mixp_nccl_why "MIXP_NCCL=OFF")
if(NOT _mixp_nccl_mode STREQUAL "OFF")
  find_path(MIXP_NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_ROOT ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  set(_mixp_nccl_why "nccl.h not found (set NCCL_ROOT)")
endif()
if(MIXP_NCCL_INCLUDE_DIR AND NOT _mixp_nccl_mode STREQUAL "OFF")
  message(STATUS "mixp: NCCL process group built (nccl.h in ${MIXP_NCCL_INCLUDE_DIR}; libnccl.so.2 loaded at run time)")
  file(GLOB _mixp_nccl_srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/dist/nccl/*.cpp")
  target_sources(mixp_cuda PRIVATE ${_mixp_nccl_srcs})
  target_include_directories(mixp_cuda PRIVATE ${MIXP_NCCL_INCLUDE_DIR})
  target_link_libraries(mixp PRIVATE ${CMAKE_DL_LIBS})
else()
  if(_mixp_nccl_mode STREQUAL "ON")
    message(FATAL_ERROR "MIXP_NCCL=ON but the NCCL process group cannot be built: ${_mixp_nccl_why}")
  endif()
  message(STATUS "mixp: NCCL process group not built (${_mixp_nccl_why})")
  target_sources(mixp PRIVATE ${_mixp_nccl_off})
endif()

target_sources(mixp PRIVATE $<TARGET_OBJECTS:mixp_cuda>)
target_link_libraries(mixp PRIVATE ${CUDA_cudart_LIBRARY} ${CMAKE_DL_LIBS})
# An installed libmixp finds CUDA's libraries where this build found them (ld.so.conf may not
# name the toolkit's folder).
set_property(TARGET mixp APPEND PROPERTY INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
