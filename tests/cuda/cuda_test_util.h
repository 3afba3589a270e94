// Shared by the GPU tests of tests/cuda: the skip that says why (no GPU), the comparisons against
// the cpu backend, and `mixp ARGS` with its output captured.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "mixp/backend/cuda.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"
#include "common/test_paths.h"

namespace mixp::cuda_test {

// Skips (gtest's "[  SKIPPED ]", which CTest counts as skipped) with the runtime's reason.
#define REQUIRE_GPU()                                                   \
  do {                                                                  \
    if (!::mixp::cuda_available())                                      \
      GTEST_SKIP() << "needs a GPU: " << ::mixp::cuda_status().message; \
  } while (0)

inline const Device kGpu = Device::cuda(0);

// ||got - want|| / ||want|| over all elements (tests/ops/op_test_util.h's measure).
inline double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to(Device::cpu()).to_double_vector();
  const std::vector<double> w = want.to(Device::cpu()).to_double_vector();
  EXPECT_EQ(g.size(), w.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = got.to(Device::cpu()).contiguous(), w = want.to(Device::cpu()).contiguous();
  ASSERT_EQ(g.nbytes(), w.nbytes()) << what;
  EXPECT_EQ(std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()), 0) << what;
}

inline Tensor host_randn(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen);
}

// The CLI the tests run: $MIXP_CLI when set (scripts/gpu-check.sh --prebuilt, where the build
// folder compiled into MIXP_CLI does not exist), else the build's own.
std::string cli_path();
// `mixp ARGS` with stdout in `out` and stderr in `err`; returns the exit status.
int run_cli(const std::string& args, std::string& out, std::string& err);
// `mixp RUN --device cpu`, then `mixp RUN --device cuda`: each must exit 0, and the cuda run end
// at the cpu run's final loss within 1e-3 relative. Returns their JSON outputs {cpu, cuda}; a run
// that fails is a test failure (naming `what`) and leaves its JSON null.
std::pair<nlohmann::json, nlohmann::json> expect_trains_like_the_cpu(const std::string& run,
                                                                     const std::string& what = "");

}  // namespace mixp::cuda_test
