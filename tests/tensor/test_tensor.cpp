// Tensor basics: factories, every storable dtype, conversions with named rounding, views and
// element access, shape-mismatch messages.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/ref/ref_backend.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {

TEST(Tensor, Factories) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(z.dtype(), DType::fp32);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(ones({4}, {.dtype = DType::fp64}).to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(full({2}, 2.5).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(arange(5).to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1.0, 2.0, 0.25).numel(), 4);
  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_DOUBLE_EQ(v.at({1, 2}), 6.0);
  EXPECT_DOUBLE_EQ(scalar_tensor(3.0).item(), 3.0);
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
  EXPECT_THROW(from_vector(std::vector<double>{1, 2}, {3}), std::invalid_argument);
  Tensor idx = from_vector(std::vector<int64_t>{5, -1}, {2});
  EXPECT_EQ(idx.dtype(), DType::int64);
  EXPECT_EQ(idx.data<int64_t>()[1], -1);
  EXPECT_THROW(idx.data<float>(), std::invalid_argument);
}

TEST(Tensor, RandomIsSeededAndDocumented) {
  Generator g1(123), g2(123), g3(124);
  const auto a = randn({100}, g1).to_vector<double>();
  const auto b = randn({100}, g2).to_vector<double>();
  const auto c = randn({100}, g3).to_vector<double>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The documented stream: first normal of seed 123 is Box-Muller of the first two draws.
  Generator g(123);
  const double u1 = 1.0 - g.uniform01(), u2 = g.uniform01();
  EXPECT_FLOAT_EQ(static_cast<float>(a[0]),
                  static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2)));
  double mean = 0, var = 0;
  Generator gl(5);
  const auto big = randn({20000}, gl, {.dtype = DType::fp64}).to_vector<double>();
  for (double x : big) mean += x;
  mean /= big.size();
  for (double x : big) var += (x - mean) * (x - mean);
  var /= big.size();
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.03);
  Generator gu(6);
  for (double x : rand({1000}, gu, {.dtype = DType::fp64}).to_vector<double>()) {
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
  Generator gi(7);
  for (double x : randint(-3, 4, {1000}, gi).to_vector<double>()) {
    EXPECT_GE(x, -3);
    EXPECT_LT(x, 4);
  }
}

TEST(Tensor, EveryRequiredDtypeStores) {
  const std::vector<double> vals{0, 1, -2, 3};
  for (DType dt : {DType::fp64, DType::fp32, DType::bf16, DType::fp16, DType::fp8_e4m3,
                   DType::fp8_e5m2, DType::int8, DType::int32, DType::int64, DType::tf32}) {
    Tensor t = from_vector(vals, {4}, {.dtype = dt});
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.element_size(), static_cast<size_t>(traits(dt).storage_bytes));
    EXPECT_EQ(t.to_vector<double>(), vals) << name(dt);
  }
  Tensor u = from_vector(std::vector<double>{0, 1, 200, 300}, {4}, {.dtype = DType::uint8});
  EXPECT_EQ(u.to_vector<double>(), (std::vector<double>{0, 1, 200, 255}));  // saturates
  Tensor b = from_vector(std::vector<double>{0, 2, -1, 0}, {4}, {.dtype = DType::boolean});
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
  for (const auto& t : all_dtypes()) {
    Tensor e = empty({3}, {.dtype = t.id});  // every registered dtype can be allocated
    EXPECT_EQ(e.nbytes(), 3u * t.storage_bytes);
  }
}

TEST(Tensor, ConversionsRoundAsNamedOrAsPyTorch) {
  Tensor x = from_vector(std::vector<double>{3.14159265, 1.0 + 1.0 / 256, 1e6}, {3});
  Tensor b = x.to(DType::bf16, Round::nearest_even);
  // Without a Round, as PyTorch's to(): nearest even for floating targets (issue 28 item 12).
  const Tensor d = x.to(DType::bf16);
  EXPECT_EQ(d.dtype(), DType::bf16);
  EXPECT_EQ(d.to_vector<double>(), b.to_vector<double>());
  EXPECT_DOUBLE_EQ(d.at({1}), 1.0);  // 1 + 2^-8 is a tie: to even, not up to 1 + 2^-7
  EXPECT_DOUBLE_EQ(from_vector(std::vector<double>{1.0 + 3.0 / 256}, {1}).to(DType::bf16).item(),
                   1.0 + 4.0 / 256);  // the other tie goes up to the even neighbour
  EXPECT_TRUE(std::isinf(from_vector(std::vector<double>{1e6}, {1}).to(DType::fp16).item()));
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.data<bfloat16>()[0].bits, 0x4049);
  EXPECT_DOUBLE_EQ(b.at({1}), 1.0);  // tie to even
  EXPECT_DOUBLE_EQ(x.to(DType::bf16, Round::toward_zero).at({0}), 3.140625);
  EXPECT_EQ(b.to(DType::fp32).dtype(), DType::fp32);  // widening is exact: no Round needed
  EXPECT_EQ(b.to(DType::fp64).dtype(), DType::fp64);
  // fp8 e4m3 overflow: ieee gives NaN, saturate clamps to 448
  Tensor big = from_vector(std::vector<double>{1000.0}, {1});
  EXPECT_TRUE(std::isnan(big.to(DType::fp8_e4m3, Round::nearest_even, Overflow::ieee).item()));
  EXPECT_DOUBLE_EQ(big.to(DType::fp8_e4m3, Round::nearest_even, Overflow::saturate).item(), 448.0);
  EXPECT_TRUE(std::isinf(big.mul_(100.0).to(DType::fp16, Round::nearest_even).item()));
  // stochastic rounding is reproducible from its seed and unbiased on average
  Tensor y = full({20000}, 1.0 + 1.0 / 512);  // a quarter of the way between two bf16 values
  const double m1 =
      mean(y.to(DType::bf16, Round::stochastic, Overflow::ieee, 11).to(DType::fp64)).item();
  const double m2 =
      mean(y.to(DType::bf16, Round::stochastic, Overflow::ieee, 11).to(DType::fp64)).item();
  EXPECT_EQ(m1, m2);
  EXPECT_NEAR(m1, 1.0 + 1.0 / 512, 2e-4);
  // integers round as named and saturate
  Tensor f = from_vector(std::vector<double>{2.5, -2.5, 3.7, 1000}, {4});
  EXPECT_EQ(f.to(DType::int8, Round::nearest_even).to_vector<double>(),
            (std::vector<double>{2, -2, 4, 127}));
  EXPECT_EQ(f.to(DType::int8, Round::toward_zero).to_vector<double>(),
            (std::vector<double>{2, -2, 3, 127}));
  // Without a Round an integer target truncates, as PyTorch's to(torch.int8) (a C cast).
  EXPECT_EQ(f.to(DType::int8).to_vector<double>(), (std::vector<double>{2, -2, 3, 127}));
  EXPECT_EQ(from_vector(std::vector<double>{7}, {1}, {.dtype = DType::int8}).to(DType::fp32).item(),
            7.0);
}

TEST(Tensor, CpuAndRefConvertAlike) {
  Generator g(3);
  Tensor x = mul(randn({1000}, g), 100.0);
  for (DType dt :
       {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2, DType::tf32, DType::fp64}) {
    for (Round r :
         {Round::nearest_even, Round::toward_zero, Round::stochastic, Round::nearest_away}) {
      for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
        if (dt == DType::fp64 && r != Round::nearest_even) continue;  // widening: exact
        Tensor a, b;
        {
          BackendGuard bg(BackendKind::cpu);
          const uint64_t before = ref_kernel_calls();
          a = x.to(dt, r, o, 77);
          // the cpu converter itself, not a fallback to the ref one (ref_backend.h)
          EXPECT_EQ(ref_kernel_calls(), before) << name(dt) << " " << to_string(r);
        }
        {
          BackendGuard bg(BackendKind::ref);
          b = x.to(dt, r, o, 77);
        }
        const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
        for (size_t i = 0; i < va.size(); ++i) {
          if (std::isnan(vb[i]))
            EXPECT_TRUE(std::isnan(va[i]));
          else
            EXPECT_EQ(va[i], vb[i]) << name(dt) << " " << to_string(r) << " " << i;
        }
        // and back to fp32 (widening) on both backends
        Tensor wa, wb;
        {
          BackendGuard bg(BackendKind::cpu);
          const uint64_t before = ref_kernel_calls();
          wa = a.to(DType::fp32, Round::nearest_even);
          EXPECT_EQ(ref_kernel_calls(), before) << name(dt) << " widening";
        }
        {
          BackendGuard bg(BackendKind::ref);
          wb = a.to(DType::fp32, Round::nearest_even);
        }
        const auto xa = wa.to_vector<double>(), xb = wb.to_vector<double>();
        for (size_t i = 0; i < xa.size(); ++i) {
          if (std::isnan(xb[i]))
            EXPECT_TRUE(std::isnan(xa[i]));
          else
            EXPECT_EQ(xa[i], xb[i]);
        }
      }
    }
  }
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = arange(12).reshape({3, 4});
  Tensor t = x.t();
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage().get(), x.storage().get());
  EXPECT_DOUBLE_EQ(t.at({3, 1}), 7.0);
  Tensor s = x.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  Tensor p = arange(24).reshape({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_DOUBLE_EQ(p.at({1, 1, 2}), 21.0);
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), x.storage().get());
  EXPECT_EQ(c.to_vector<double>(), t.to_vector<double>());
  EXPECT_EQ(x.view({-1}).shape(), (Shape{12}));
  EXPECT_THROW(t.view({12}), std::invalid_argument);  // not viewable: reshape copies instead
  EXPECT_EQ(t.reshape({12}).to_vector<double>(), t.to_vector<double>());
  EXPECT_EQ(x.select(0, 2).to_vector<double>(), (std::vector<double>{8, 9, 10, 11}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).shape(), (Shape{3, 4}));
  EXPECT_EQ(arange(3).reshape({3, 1}).expand({3, 2}).to_vector<double>(),
            (std::vector<double>{0, 0, 1, 1, 2, 2}));
  Tensor y = zeros({2, 2});
  y.set_at({0, 1}, 5.0);
  EXPECT_DOUBLE_EQ(y.at({0, 1}), 5.0);
  EXPECT_THROW(y.at({2, 0}), std::out_of_range);
  auto parts = chunk(arange(6), 3, 0);
  EXPECT_EQ(parts[2].to_vector<double>(), (std::vector<double>{4, 5}));
  EXPECT_EQ(cat({arange(2), arange(3)}, 0).to_vector<double>(),
            (std::vector<double>{0, 1, 0, 1, 2}));
  EXPECT_EQ(stack({arange(2), arange(2)}, 1).shape(), (Shape{2, 2}));
}

TEST(Tensor, InPlaceOps) {
  Tensor a = arange(4);
  a.add_(ones({4}), 2.0);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{2, 3, 4, 5}));
  a.mul_(0.5);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, 1.5, 2, 2.5}));
  a.zero_();
  EXPECT_EQ(a.to_vector<double>(), std::vector<double>(4, 0.0));
  a.fill_(7);
  a.copy_(scalar_tensor(3.0));
  EXPECT_EQ(a.to_vector<double>(), std::vector<double>(4, 3.0));
  Tensor h = zeros({4}, {.dtype = DType::bf16});
  h.copy_(arange(4));
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{0, 1, 2, 3}));
}

TEST(Tensor, ShapeMismatchNamesOpAndBothShapes) {
  auto expect_msg = [](auto&& f, const std::vector<std::string>& parts) {
    try {
      f();
      FAIL() << "no exception";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m << " lacks " << p;
    }
  };
  expect_msg([] { add(zeros({2, 3}), zeros({4})); }, {"add", "[2, 3]", "[4]"});
  expect_msg([] { matmul(zeros({2, 3}), zeros({4, 5})); }, {"matmul", "[2, 3]", "[4, 5]"});
  expect_msg([] { bmm(zeros({2, 2, 3}), zeros({3, 3, 5})); }, {"bmm", "[2, 2, 3]", "[3, 3, 5]"});
  expect_msg([] { linear(zeros({2, 3}), zeros({5, 4})); }, {"linear", "[2, 3]", "[5, 4]"});
  expect_msg(
      [] {
        conv2d(zeros({1, 3, 5, 5}), zeros({2, 4, 3, 3}));
      },
      {"conv2d", "[1, 3, 5, 5]", "[2, 4, 3, 3]"});
  expect_msg([] { cat({zeros({2, 3}), zeros({3, 3})}, 1); }, {"cat", "[2, 3]", "[3, 3]"});
  expect_msg([] { mse_loss(zeros({2}), zeros({3})); }, {"mse_loss", "[2]", "[3]"});
  expect_msg(
      [] {
        cross_entropy(zeros({2, 3}), zeros({3}, {.dtype = DType::int64}));
      },
      {"cross_entropy", "[2, 3]", "[3]"});
  expect_msg([] { zeros({2, 3}).view({4}); }, {"view", "[2, 3]", "[4]"});
  expect_msg([] { layer_norm(zeros({2, 3}), {4}); }, {"layer_norm", "[2, 3]", "[4]"});
}

TEST(Tensor, Str) {
  const std::string s = from_vector(std::vector<double>{1, 2}, {2}).str();
  EXPECT_NE(s.find("shape=[2]"), std::string::npos);
  EXPECT_NE(s.find("fp32"), std::string::npos);
  EXPECT_NE(s.find("values=[1, 2])"), std::string::npos) << s;
  const Tensor big = zeros({40});
  EXPECT_NE(big.str(3).find("values=[0, 0, 0, ...])"), std::string::npos) << big.str(3);
  // str(0): shape and dtype only (it printed "values=[, ...]")
  EXPECT_EQ(big.str(0), "Tensor(shape=[40], dtype=fp32)");
}

}  // namespace
}  // namespace mixp

namespace mixp {
namespace {

TEST(Tensor, EmptyAndScalarEdgeCases) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(add(e, ones({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(relu(e).numel(), 0);
  EXPECT_DOUBLE_EQ(sum(e).item(), 0.0);
  EXPECT_EQ(sum(e, {0}).to_vector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(matmul(zeros({0, 4}), zeros({4, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(cat({e, ones({2, 3})}, 0).shape(), (Shape{2, 3}));
  EXPECT_THROW(max(e), std::invalid_argument);
  Tensor s = scalar_tensor(2.0).requires_grad_();
  Tensor y = mul(mul(s, s), 3.0);  // 3 s^2
  y.backward();
  EXPECT_DOUBLE_EQ(s.grad().item(), 12.0);
  EXPECT_EQ(add(s, ones({2, 2})).shape(), (Shape{2, 2}));
  EXPECT_DOUBLE_EQ(softmax(scalar_tensor(5.0), 0).item(), 1.0);
}

}  // namespace
}  // namespace mixp
