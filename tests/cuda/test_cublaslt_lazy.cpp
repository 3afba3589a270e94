// cuBLASLt is loaded on first use, not linked (src/backend/cuda/cublaslt_api.h): a process that
// only computes on the CPU never maps its 540 MB (and never pays its 0.35 s of static
// constructors), and the lazy loader resolves every function the CUDA backend calls. Neither check
// needs a GPU; both skip when the CUDA backend is not built.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda_entry.h"
#include "mixp/backend/cuda.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

// A CPU matmul, then whether cuBLASLt got mapped on the way.
bool cpu_work_then_mapped() {
  Generator gen(1);
  Tensor a = randn({64, 64}, gen);
  Tensor b = randn({64, 64}, gen);
  Tensor c = matmul(a, b);
  return c.numel() != 64 * 64 || detail::cublaslt_mapped();
}

TEST(CublasLtLazy, ACpuOnlyProcessNeverMapsIt) {
  if (!cuda_status().built) GTEST_SKIP() << "the CUDA backend is not built";
  // "threadsafe" re-runs this test in a fresh process: a fork would inherit whatever this
  // process (running other tests first) has mapped.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(cpu_work_then_mapped() ? 1 : 0), testing::ExitedWithCode(0), "");
}

TEST(CublasLtLazy, TheLoaderResolvesEveryEntryPoint) {
  if (!cuda_status().built) GTEST_SKIP() << "the CUDA backend is not built";
  EXPECT_EQ(detail::cublaslt_probe(), "CUBLAS_STATUS_SUCCESS");
  EXPECT_TRUE(detail::cublaslt_mapped());
}

}  // namespace
}  // namespace mixp
