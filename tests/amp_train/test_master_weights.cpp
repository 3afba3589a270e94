// The optimizer's low-precision paths: master weights, pure 16-bit parameters updated through fp32
// chunks, stochastic write-back, bf16 optimizer states and Kahan-compensated write-back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "mixp/autograd/grad_mode.h"
#include "mixp/format/convert.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {
namespace {

using ::testing::HasSubstr;

std::vector<uint16_t> bits16(const Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.data_ptr());
  return std::vector<uint16_t>(p, p + t.numel());
}

// A pure bf16 parameter updated by the chunked path equals an fp32 parameter holding the same
// values, updated by the plain fp32 kernel and rounded afterwards — for every chunking and
// thread count.
TEST(LowPrecisionOptimizer, PureBf16EqualsFp32UpdateThenRound) {
  for (int64_t n : {int64_t{5}, int64_t{4096 + 7}, int64_t{3} << 15}) {
    for (Round r : {Round::nearest_even, Round::stochastic}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " round=" << to_string(r));
      Generator gen(7);
      Tensor w16 = randn({n}, gen).to(DType::bf16, Round::nearest_even).requires_grad_();
      Tensor w32 = w16.detach().to(DType::fp32).requires_grad_();
      const PrecisionOptions pure{.master_weights = false, .write_back = r, .seed = 99};
      AdamW a16(NamedTensors{{"w", w16}}, {.lr = 1e-2, .precision = pure});
      AdamW a32(NamedTensors{{"w", w32}}, {.lr = 1e-2});
      for (int s = 0; s < 3; ++s) {
        Tensor g = randn({n}, gen);
        w16.set_grad(g.clone());
        w32.set_grad(g.clone());
        a16.step();
        a32.step();
        // The fp32 run keeps its unrounded value; round a copy with the same stream.
        const Tensor expect = w32.detach().to(DType::bf16, r, Overflow::ieee,
                                              a16.write_back_seed(0, s + 1));
        ASSERT_EQ(bits16(w16.detach()), bits16(expect));
        NoGradGuard ng;
        w32.copy_(w16.detach());  // continue both from the rounded values
      }
    }
  }
}

TEST(LowPrecisionOptimizer, StochasticWriteBackIsThreadCountIndependent) {
  std::vector<std::vector<uint16_t>> results;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Generator gen(3);
    Tensor w = randn({int64_t{1} << 17}, gen).to(DType::bf16, Round::nearest_even).requires_grad_();
    AdamW opt(NamedTensors{{"w", w}},
              {.lr = 1e-3,
               .precision = {.master_weights = false,
                             .write_back = Round::stochastic,
                             .seed = 5,
                             .state_dtype = DType::bf16}});
    for (int s = 0; s < 2; ++s) {
      w.set_grad(randn(w.shape(), gen));
      opt.step();
    }
    results.push_back(bits16(w.detach()));
    results.push_back(bits16(opt.params()[0].slots[1]));
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(results[1], results[3]);
}

TEST(LowPrecisionOptimizer, Bf16StatesAreStoredInBf16AndKeepMovingWithStochasticRounding) {
  // v = beta2 v + (1 - beta2) g^2 with g = 1 and v = 1: the increment is 1e-3 of v, below half
  // a bf16 ulp of 1 (2^-8): nearest rounding freezes v, stochastic rounding keeps it unbiased.
  for (Round r : {Round::nearest_even, Round::stochastic}) {
    Tensor w = zeros({4096}, {.dtype = DType::bf16}).requires_grad_();
    Adam opt(NamedTensors{{"w", w}},
             {.lr = 0.0,
              .beta2 = 0.999,
              .precision = {.master_weights = false, .write_back = r, .state_dtype = DType::bf16}});
    EXPECT_EQ(opt.params()[0].slots[1].dtype(), DType::bf16);
    {
      NoGradGuard ng;
      Tensor v = opt.params()[0].slots[1];  // a handle to the state
      v.fill_(0.5);
    }
    for (int s = 0; s < 200; ++s) {
      w.set_grad(ones({4096}));
      opt.step();
    }
    // Exact: v_200 = 1 - 0.5 * 0.999^200 = 0.5907...
    double mean = 0;
    for (double v : opt.params()[0].slots[1].to_vector()) mean += v / 4096;
    if (r == Round::nearest_even) {
      EXPECT_EQ(mean, 0.5);  // frozen
    } else {
      EXPECT_NEAR(mean, 1.0 - 0.5 * std::pow(0.999, 200), 2e-3);
    }
  }
}

TEST(LowPrecisionOptimizer, KahanCompensationKeepsUpdatesBelowHalfAnUlp) {
  // SGD steps of 1e-3 on bf16 values near 1 (ulp 2^-7 below 1, 2^-8 half-ulp): nearest rounding
  // drops every step; the Kahan buffer carries them until they add up.
  auto run = [](bool kahan, Round r) {
    Tensor w = ones({1000}, {.dtype = DType::bf16}).requires_grad_();
    SGD opt(NamedTensors{{"w", w}},
            {.lr = 1e-3,
             .precision = {.master_weights = false, .write_back = r, .seed = 1, .kahan = kahan}});
    for (int s = 0; s < 100; ++s) {
      w.set_grad(ones({1000}));
      opt.step();
    }
    double sum = 0;
    for (double v : w.to_vector()) sum += v;
    return sum / 1000;
  };
  EXPECT_EQ(run(false, Round::nearest_even), 1.0);         // every update vanished
  EXPECT_NEAR(run(true, Round::nearest_even), 0.9, 4e-3);  // within one bf16 ulp
  EXPECT_NEAR(run(false, Round::stochastic), 0.9, 4e-3);   // unbiased on average
}

TEST(LowPrecisionOptimizer, KahanStateRoundTrips) {
  auto make = [](Tensor& w) {
    w = full({64}, 1.0, {.dtype = DType::bf16}).requires_grad_();
    return std::make_unique<AdamW>(
        NamedTensors{{"w", w}},
        AdamOptions{.lr = 1e-4, .precision = {.master_weights = false, .kahan = true}});
  };
  Tensor wa, wb;
  auto a = make(wa);
  auto b = make(wb);
  Generator gen(11);
  for (int s = 0; s < 3; ++s) {
    wa.set_grad(randn({64}, gen));
    a->step();
  }
  const StateDict sd = a->state_dict();
  ASSERT_NE(sd.find_tensor("w.kahan"), nullptr);
  EXPECT_EQ(sd.find_tensor("w.kahan")->dtype(), DType::bf16);
  {
    NoGradGuard ng;
    wb.copy_(wa.detach());
  }
  b->load_state_dict(sd);
  for (int s = 0; s < 3; ++s) {
    Tensor g = randn({64}, gen);
    wa.set_grad(g.clone());
    wb.set_grad(g.clone());
    a->step();
    b->step();
  }
  EXPECT_EQ(bits16(wa.detach()), bits16(wb.detach()));
  EXPECT_EQ(bits16(a->params()[0].comp), bits16(b->params()[0].comp));
}

TEST(LowPrecisionOptimizer, MasterWeightsWithBf16StatesUseTheChunkedPath) {
  Generator gen(2);
  Tensor w = randn({5000}, gen).to(DType::bf16, Round::nearest_even).requires_grad_();
  AdamW opt(NamedTensors{{"w", w}},
            {.lr = 1e-2, .precision = {.master_weights = true, .state_dtype = DType::bf16}});
  ASSERT_TRUE(opt.params()[0].master.defined());
  w.set_grad(randn({5000}, gen));
  opt.step();
  // The parameter is the master rounded to nearest.
  const Tensor expect = opt.params()[0].master.to(DType::bf16, Round::nearest_even);
  EXPECT_EQ(bits16(w.detach()), bits16(expect));
}

TEST(LowPrecisionOptimizer, OptionErrors) {
  Tensor w = zeros({4}, {.dtype = DType::bf16}).requires_grad_();
  EXPECT_THAT(
      [&] {
        SGD(NamedTensors{{"w", w}}, {.precision = {.master_weights = true, .kahan = true}});
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("set master_weights = false")));
  EXPECT_THAT(
      [&] { SGD(NamedTensors{{"w", w}}, {.precision = {.state_dtype = DType::fp16}}); },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("fp32 or bf16, not fp16")));
}

}  // namespace
}  // namespace mixp::optim
