// Internal: cuBLASLt loaded on first use, not linked. libcublasLt is 540 MB and its static
// constructors cost about 0.35 s in every process that maps it; linked into libmixp, every mixp
// command and every test process paid that even on a CPU-only run (issue 28 item 14). Now
// libmixp calls cuBLASLt only through lt(), which dlopens the library the build found the first
// time a CUDA device context is made (cuda_device.cpp) and resolves the functions below.
// Adding a cuBLASLt call: add its name to MIXP_CUBLASLT_FUNCTIONS and call lt().name(...).
#pragma once
#include <cublasLt.h>

namespace mixp::cuda {

#define MIXP_CUBLASLT_FUNCTIONS(X)                                                          \
  X(cublasLtCreate) X(cublasLtGetStatusName) X(cublasLtGetStatusString) X(cublasLtMatmul)   \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)                       \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                               \
  X(cublasLtMatrixLayoutSetAttribute)

// The resolved entry points, with cublasLt.h's own prototypes (decltype does not link them).
struct CublasLtApi {
#define MIXP_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  MIXP_CUBLASLT_FUNCTIONS(MIXP_CUBLASLT_MEMBER)
#undef MIXP_CUBLASLT_MEMBER
};

// Loads libcublasLt on the first call (thread-safe; a failed load is retried by the next call).
// Throws std::runtime_error naming the library, what the loader said and what to do.
const CublasLtApi& lt();

// RAII for the descriptors of one cuBLASLt GEMM (cuda_gemm.cpp's plain GEMMs and
// cuda_block_gemm.cpp's block-scaled ones): destroyed in reverse order of creation.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) lt().cublasLtMatmulPreferenceDestroy(pref);
    if (c) lt().cublasLtMatrixLayoutDestroy(c);
    if (b) lt().cublasLtMatrixLayoutDestroy(b);
    if (a) lt().cublasLtMatrixLayoutDestroy(a);
    if (op) lt().cublasLtMatmulDescDestroy(op);
  }
};

// Whether this process has mapped libcublasLt (reads /proc/self/maps); detail::cublaslt_mapped
// (backend/cuda_entry.h) for tests/cuda/test_cublaslt_lazy.cpp.
bool mapped();

}  // namespace mixp::cuda
