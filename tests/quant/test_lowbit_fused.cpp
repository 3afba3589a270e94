// The packed binary-act model's fused sign epilogue (src/quant/lowbit_fused.cpp): the threshold
// kernels against their formula, and the fused model against the fake-quantized one bit for bit
// where the thresholds are hard to get right: negative batch-norm scales (the chain decreases),
// zero scales and large shifts (a constant sign), and the ends of the sums' range.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "backend/cpu/sign_bits.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/lowbit_gemm.h"
#include "mixp/format/cpu_features.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/tensor/factories.h"
#include "quant_test_util.h"

namespace mixp::quant {
namespace {

TEST(SignBits, KernelsMatchTheFormula) {
  std::mt19937 rng(7);
  for (const int64_t O : {1, 15, 16, 17, 63, 64, 65, 130}) {
    SCOPED_TRACE(O);
    const int64_t M = 9, CW = (O + 63) / 64;
    std::vector<int32_t> acc(M * O), t(O);
    std::uniform_int_distribution<int32_t> d(-40, 40);
    for (auto& v : acc) v = d(rng);
    for (auto& v : t) v = d(rng);
    t[0] = std::numeric_limits<int32_t>::min();
    acc[0] = std::numeric_limits<int32_t>::max();
    std::vector<uint64_t> flip(CW, 0), want(M * CW, 0);
    for (int64_t o = 0; o < O; o += 3) flip[o / 64] |= uint64_t{1} << (o % 64);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t o = 0; o < O; ++o) {
        const bool neg = (acc[m * O + o] < t[o]) != (((flip[o / 64] >> (o % 64)) & 1) != 0);
        if (neg) want[m * CW + o / 64] |= uint64_t{1} << (o % 64);
      }
    }
    std::vector<uint64_t> got(M * CW, ~uint64_t{0});
    cpu::bits::sign_bits_generic(got.data(), acc.data(), M, O, t.data(), flip.data());
    EXPECT_EQ(got, want);
    if (cpu_features().use_avx512()) {
      std::fill(got.begin(), got.end(), ~uint64_t{0});
      cpu::bits::sign_bits_avx512(got.data(), acc.data(), M, O, t.data(), flip.data());
      EXPECT_EQ(got, want);
    }
    std::fill(got.begin(), got.end(), ~uint64_t{0});
    sign_bits_s32(got.data(), acc.data(), M, O, t.data(), flip.data());
    EXPECT_EQ(got, want);
  }
}

// A trained binary-act cnn whose batch norms get negative, zero and shifted scales.
void check_cnn(int64_t width, uint64_t seed, bool wild_batch_norm) {
  nn::ModelConfig c;
  c.name = "cnn";
  c.seed = seed;
  c.width = width;
  c.mlp_width = 24;
  auto model = nn::make_model(c);
  prepare_lowbit_qat(*model, LowBitConfig{LowBitScheme::binary_act, {}});
  Generator g(seed + 1);
  const Tensor x = testing::train_lowbit_then_freeze(*model, g, 12, 2);
  if (wild_batch_norm) {
    NoGradGuard ng;
    for (auto& [n, m] : model->named_modules()) {
      auto* bn = dynamic_cast<QatBatchNorm2d*>(m);
      if (bn == nullptr) continue;
      float* gamma = const_cast<Tensor&>(bn->weight()).data<float>();
      float* beta = const_cast<Tensor&>(bn->bias()).data<float>();
      for (int64_t ch = 0; ch < bn->weight().numel(); ++ch) {
        switch (ch % 5) {
          case 0: gamma[ch] = -gamma[ch]; break;      // decreasing chain: flipped threshold
          case 1: gamma[ch] = 0.0f; break;            // constant: beta's sign
          case 2: beta[ch] = 1e6f; break;             // always +1 in the sums' range
          case 3: beta[ch] = -1e6f; gamma[ch] = -1e-3f; break;  // always -1
          default: break;
        }
      }
      const_cast<Tensor&>(bn->weight()).bump_version();
      const_cast<Tensor&>(bn->bias()).bump_version();
    }
  }
  const Tensor want = model->forward(x);
  auto packed = convert_to_packed(*model);
  int fused = 0;
  for (size_t i = 0; i < packed->steps().size(); ++i) fused += packed->sign_fused(i) ? 1 : 0;
  EXPECT_EQ(fused, 2);  // conv1 (int8) and conv2 (XNOR) end in sign bits
  EXPECT_EQ(packed->forward(x).to_vector<float>(), want.to_vector<float>());
}

TEST(PackedFusedSign, EqualsFakeQuantAfterTraining) { check_cnn(8, 21, false); }
TEST(PackedFusedSign, EqualsFakeQuantWithNegativeZeroAndShiftedBatchNorm) { check_cnn(8, 22, true); }
TEST(PackedFusedSign, EqualsFakeQuantWithMoreThan64ChannelsAndOddCounts) {
  check_cnn(40, 23, true);  // conv2: 80 channels, two words per position, flattened with shifts
}
TEST(PackedFusedSign, EqualsFakeQuantWithChannelsOutsideTheKernelsBlocks) {
  check_cnn(6, 25, true);  // conv2: 12 channels, not a multiple of 16: the row-at-a-time path
}
TEST(PackedFusedSign, EqualsFakeQuantAtTheBuiltInWidth) {
  check_cnn(32, 24, true);  // conv2: 64 channels, one whole word per position
}

}  // namespace
}  // namespace mixp::quant
