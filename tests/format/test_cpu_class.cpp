// mixp::cpu_class(): the CPU class golden runs are recorded per (src/format/cpu_features.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "mixp/format/cpu_features.h"

namespace mixp {
namespace {

TEST(CpuClass, FollowsTheTierAndTheFeatures) {
  const CpuFeatures& f = cpu_features();
  const std::string c = cpu_class();
  const auto& all = cpu_classes();
  EXPECT_NE(std::find(all.begin(), all.end(), c), all.end()) << c;
  switch (simd_tier()) {
    case SimdTier::avx512:
      EXPECT_EQ(c, f.amx_tile && f.amx_bf16 && f.os_amx ? "amx"
                   : f.avx512_bf16                       ? "avx512-bf16"
                                                         : "avx512");
      break;
    case SimdTier::avx2:
      EXPECT_EQ(c, "avx2");
      break;
    case SimdTier::scalar:
      EXPECT_EQ(c, "scalar");
      break;
  }
}

TEST(CpuClass, ThisRepositorysRecordingHostIsAvx512Bf16) {
  // The golden runs in tests/golden/engine/avx512-bf16 were recorded on an AMD EPYC (Zen 5):
  // AVX-512 with AVX512_BF16, no AMX. Such a host (uncapped) is of that class.
  const CpuFeatures& f = cpu_features();
  if (!f.use_avx512() || !f.avx512_bf16 || f.amx_tile || std::getenv("MIXP_CPU_TIER")) {
    GTEST_SKIP() << "not an AVX512-BF16 host without AMX";
  }
  EXPECT_STREQ(cpu_class(), "avx512-bf16");
}

TEST(CpuClass, ClassesMostCapableFirst) {
  EXPECT_EQ(cpu_classes(),
            (std::vector<std::string>{"amx", "avx512-bf16", "avx512", "avx2", "scalar"}));
}

}  // namespace
}  // namespace mixp
