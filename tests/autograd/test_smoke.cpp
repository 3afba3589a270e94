#include <gtest/gtest.h>

#include "mixp/autograd/gradcheck.h"
#include "mixp/mixp.h"

namespace mixp {
TEST(Smoke, AddMulBackward) {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{4, 5, 6}, {3}).requires_grad_();
  Tensor y = sum(a * b + a);
  EXPECT_DOUBLE_EQ(y.item(), 4 + 10 + 18 + 6);
  y.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
}
TEST(Smoke, LinearGradcheck) {
  Generator gen(1);
  Tensor x = randn({4, 3}, gen, {.dtype = DType::fp64}).requires_grad_();
  Tensor w = randn({5, 3}, gen, {.dtype = DType::fp64}).requires_grad_();
  Tensor b = randn({5}, gen, {.dtype = DType::fp64}).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
}
TEST(Smoke, MatmulCpuVsRef) {
  Generator gen(2);
  Tensor a = randn({64, 32}, gen), b = randn({32, 48}, gen);
  Tensor c1 = matmul(a, b);
  Tensor c2;
  {
    BackendGuard g(BackendKind::ref);
    c2 = matmul(a, b);
  }
  auto v1 = c1.to_vector<double>(), v2 = c2.to_vector<double>();
  for (size_t i = 0; i < v1.size(); ++i) ASSERT_NEAR(v1[i], v2[i], 1e-4);
}
}  // namespace mixp
