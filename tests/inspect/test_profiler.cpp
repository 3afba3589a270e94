// The op profiler (mixp/inspect/profiler.h): calls and FLOPs per kernel are what the ops did
// (a matmul of [M, K] x [K, N] counts 2 M N K), casts appear as their own "fp32->bf16" rows,
// backward kernels are marked backward, and the Chrome trace parses and its durations add up to
// the table's total.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "mixp/inspect/profiler.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::inspect {
namespace {

TEST(Profiler, CountsFlopsCastsAndPhases) {
  Generator g(1);
  const Tensor a = randn({32, 64}, g).requires_grad_();
  const Tensor b = randn({64, 16}, g);
  Profiler p;
  p.install();
  Tensor y = matmul(a, b);
  const Tensor h = a.to(DType::bf16, Round::nearest_even);
  sum(y).backward();
  p.uninstall();
  (void)matmul(a, b);  // not counted: uninstalled

  const std::vector<ProfileRow> rows = p.rows();
  double fwd_flops = 0;
  int64_t fwd_calls = 0, bwd_matmuls = 0;
  bool cast = false;
  for (const ProfileRow& r : rows) {
    if (r.op == "matmul" && r.phase == KernelPhase::forward) {
      fwd_flops += r.flops;
      fwd_calls += r.calls;
    }
    if (r.op == "matmul" && r.phase == KernelPhase::backward) bwd_matmuls += r.calls;
    if (r.dtype == "fp32->bf16") cast = true;
    EXPECT_GT(r.ns, 0) << r.op;
    EXPECT_GT(r.bytes, 0) << r.op;
  }
  EXPECT_EQ(fwd_calls, 1);
  EXPECT_EQ(fwd_flops, 2.0 * 32 * 64 * 16);
  EXPECT_GE(bwd_matmuls, 1) << "the gradient of a is a matmul in backward";
  EXPECT_TRUE(cast) << p.table();
  EXPECT_NE(p.table().find("casts"), std::string::npos);

  const mixp::test::TempDir dir;
  const auto path = dir / "trace.json";
  p.write_trace(path);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  double dur_us = 0;
  for (const auto& e : j.at("traceEvents")) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_TRUE(e.at("args").contains("dtype"));
    dur_us += e.at("dur").get<double>();
  }
  int64_t calls = 0;
  for (const ProfileRow& r : rows) calls += r.calls;
  EXPECT_EQ(int64_t(j["traceEvents"].size()), calls);
  // Durations are written to the nanosecond: at most half a nanosecond off each.
  EXPECT_NEAR(dur_us * 1e3, p.total_ns(), 0.5 * double(calls) + 1e-9 * p.total_ns());
}

}  // namespace
}  // namespace mixp::inspect
