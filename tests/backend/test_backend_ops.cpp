// test-backend-ops (after ggml's): walks the kernel table (mixp/backend/kernels.def) and the op
// codes (mixp/backend/op_codes.h), runs every case below on every backend present (cpu; cuda when
// built and a device is visible) against the ref backend, per dtype, and prints the support
// matrix: kernel/variant x backend x dtype, "ok" (own kernels only, within tolerance), "ref"
// (within tolerance, but the run used RefBackend code for that dtype: a fallback, or a ref
// conversion around the backend's kernel; ref_kernel_calls()), "-" (the backend refuses the
// dtype: it threw), "FAIL" (outside tolerance). Every row of the table must either
// have a case here or name the test that covers it (kCoveredElsewhere): adding a kernel without a
// test fails here. The per-op GB/s are bench/backend_ops.cpp's (docs/benchmarks.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

// The table's rows, expanded here as everywhere else.
struct Row {
  const char* name;
  bool ref, cpu, cuda;
};
const std::vector<Row>& table_rows() {
  static const std::vector<Row> rows = {
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) {#name, ref, cpu, cuda},
#include "mixp/backend/kernels.def"
  };
  return rows;
}

// Kernels whose cases live in other tests (their inputs need more set-up than a generic case:
// specs, saved state, GEMM shapes), with the file that compares them with ref.
const std::map<std::string, const char*> kCoveredElsewhere = {
    {"copy", "tests/ops/test_ops_vs_ref.cpp (contiguous, strided)"},
    {"convert", "tests/convert, tests/ops/test_vec_tiers.cpp"},
    {"fill", "tests/ops/test_ops_vs_ref.cpp"},
    {"add_inplace", "tests/ops/test_backend.cpp"},
    {"dropout", "tests/ops/test_ops_vs_ref.cpp"},
    {"reduce_max_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"argmax", "tests/ops/test_ops_vs_ref.cpp"},
    {"softmax_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"layer_norm_xhat", "tests/backend/test_step_kernels.cpp"},
    {"layer_norm_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"layer_norm_backward_xhat", "tests/amp/test_layer_norm_saves.cpp"},
    {"batch_norm", "tests/ops/test_ops_vs_ref.cpp"},
    {"rms_norm", "tests/ops/test_llama_ops.cpp (CpuVsRef.RmsNormAndRope)"},
    {"rms_norm_backward", "tests/ops/test_llama_ops.cpp (CpuVsRef.RmsNormAndRope)"},
    {"rope", "tests/ops/test_llama_ops.cpp (CpuVsRef.RmsNormAndRope)"},
    {"batch_norm_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"embedding", "tests/ops/test_ops_vs_ref.cpp"},
    {"embedding_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"embedding_backward_add", "tests/ops/test_ops_vs_ref.cpp"},
    {"max_pool2d", "tests/ops/test_ops_vs_ref.cpp"},
    {"max_pool2d_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"avg_pool2d", "tests/ops/test_ops_vs_ref.cpp"},
    {"avg_pool2d_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"matmul", "tests/ops/test_ops_vs_ref.cpp, tests/backend/test_gemm_bf16.cpp"},
    {"conv2d", "tests/ops/test_ops_vs_ref.cpp"},
    {"conv2d_backward_data", "tests/ops/test_ops_vs_ref.cpp"},
    {"conv2d_backward_weights", "tests/ops/test_ops_vs_ref.cpp"},
    {"attention", "tests/ops/test_attention_vs_ref.cpp"},
    {"attention_backward", "tests/ops/test_attention_vs_ref.cpp"},
    {"cross_entropy", "tests/ops/test_ops_vs_ref.cpp"},
    {"cross_entropy_backward", "tests/ops/test_ops_vs_ref.cpp"},
    {"cross_entropy_in_place", "tests/ops/test_cross_entropy_in_place.cpp"},
    {"cross_entropy_in_place_backward", "tests/ops/test_cross_entropy_in_place.cpp"},
    {"unscale_check", "tests/backend/test_step_kernels.cpp"},
    {"sum_squares", "tests/backend/test_step_kernels.cpp"},
    {"optimizer_update", "tests/backend/test_step_kernels.cpp"},
    {"amax", "tests/backend/test_quantize_kernels.cpp"},
    {"minmax", "tests/backend/test_quantize_kernels.cpp"},
    {"quantize", "tests/backend/test_quantize_kernels.cpp"},
    {"mask_grad", "tests/backend/test_quantize_kernels.cpp"},
    {"lowbit_codes", "tests/quant, tests/cuda/test_cuda_quant_math.cpp"},
    {"lowbit_codes_backward", "tests/quant, tests/cuda/test_cuda_quant_math.cpp"},
    {"scale_bias_act", "tests/backend/test_quantize_kernels.cpp"},
    {"fp8_scale_update", "ref only on the host; tests/cuda/test_cuda_quant_math.cpp"},
    {"count_nonfinite", "ref only on the host; tests/cuda/test_cuda_quant_math.cpp"},
    {"binary_cross_entropy", "ref only on the host; tests/cuda/test_cuda_quant_math.cpp"},
    {"binary_cross_entropy_backward", "ref only on the host; tests/cuda/test_cuda_quant_math.cpp"},
};

// Tolerances on the normalized error ||x - ref|| / ||ref|| per compute dtype (the case table's
// column): fp32 results of the cpu's polynomial exp/tanh (<= 2 ulp) and fp32 row sums (ref sums
// in double) stay far below 2e-5 (tests/ops/op_test_util.h derives the same bound); bf16 outputs
// round the same fp32 value, so they differ by at most one bf16 ulp (2^-8) on a few elements;
// fp64 kernels are ref's own on the cpu.
struct Tol {
  double fp32 = 2e-5, fp64 = 1e-12, bf16 = 4e-3;
  double of(DType d) const { return d == DType::fp64 ? fp64 : d == DType::bf16 ? bf16 : fp32; }
};

// One case: fills `outs` (allocated by the case on `dev`) from inputs made on the host. Inputs are
// built from `seed` in dtype `dt`; the same function runs on every backend.
using CaseFn = std::function<std::vector<Tensor>(Backend&, DType dt, Device dev)>;
struct Case {
  std::string kernel, variant;
  std::vector<DType> dtypes;
  Tol tol;
  CaseFn run;
};

Tensor input(const Shape& s, uint64_t seed, DType dt, Device dev, double lo, double hi) {
  Generator g(seed);
  return uniform(s, lo, hi, g, {.dtype = DType::fp64}).to(dt, Round::nearest_even).to(dev);
}
Tensor out(const Shape& s, DType dt, Device dev) {
  return Tensor::empty(s, {.dtype = dt, .device = dev});
}

const Shape kRows{6, 67};  // 67: a SIMD remainder on every tier
const std::vector<DType> kPointwise{DType::fp32, DType::fp64, DType::bf16};
const std::vector<DType> kFloat{DType::fp32, DType::fp64};

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (int i = 0; i < kNumUnaryOps; ++i) {
    const auto op = static_cast<UnaryOp>(i);
    // log and sqrt want positive inputs; the rest a range around 0 that reaches the tails.
    const bool pos = op == UnaryOp::log || op == UnaryOp::sqrt;
    const double lo = pos ? 0.05 : -4.0, hi = 4.0;
    cs.push_back({"unary", to_string(op), kPointwise, {}, [=](Backend& be, DType dt, Device dev) {
                    Tensor x = input(kRows, 1 + i, dt, dev, lo, hi), y = out(kRows, dt, dev);
                    be.unary(op, y, x);
                    return std::vector<Tensor>{y};
                  }});
    cs.push_back({"unary_backward", to_string(op), kPointwise, {},
                  [=](Backend& be, DType dt, Device dev) {
                    Tensor x = input(kRows, 1 + i, dt, dev, lo, hi), y = out(kRows, dt, dev);
                    get_backend(BackendKind::ref).unary(op, y, x);  // dst from the oracle
                    Tensor g = input(kRows, 100 + i, dt, dev, -1.0, 1.0), gi = out(kRows, dt, dev);
                    const UnaryReads r = unary_backward_reads(op);
                    be.unary_backward(op, gi, g, r == UnaryReads::src ? x : Tensor(),
                                      r == UnaryReads::dst ? y : Tensor());
                    return std::vector<Tensor>{gi};
                  }});
  }
  for (int i = 0; i < kNumBinaryOps; ++i) {
    const auto op = static_cast<BinaryOp>(i);
    cs.push_back({"binary", to_string(op), kPointwise, {}, [=](Backend& be, DType dt, Device dev) {
                    Tensor a = input(kRows, 10 + i, dt, dev, -2.0, 2.0);
                    Tensor b = input(kRows, 20 + i, dt, dev, 0.5, 2.0), d = out(kRows, dt, dev);
                    be.binary(op, d, a, b);
                    return std::vector<Tensor>{d};
                  }});
  }
  for (int i = 0; i < kNumScalarOps; ++i) {
    const auto op = static_cast<ScalarOp>(i);
    cs.push_back({"scalar", to_string(op), kPointwise, {}, [=](Backend& be, DType dt, Device dev) {
                    Tensor x = input(kRows, 30 + i, dt, dev, 0.25, 2.0), d = out(kRows, dt, dev);
                    be.scalar(op, d, x, 1.5);
                    return std::vector<Tensor>{d};
                  }});
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    cs.push_back({"reduce", to_string(op), kPointwise, {}, [=](Backend& be, DType dt, Device dev) {
                    Tensor x = input(kRows, 40 + i, dt, dev, -2.0, 2.0);
                    Tensor d = out({kRows[0], 1}, dt, dev);
                    be.reduce(op, d, x);
                    return std::vector<Tensor>{d};
                  }});
  }
  for (bool log : {false, true}) {
    cs.push_back({"softmax", log ? "log" : "", kFloat, {}, [=](Backend& be, DType dt, Device dev) {
                    Tensor x = input(kRows, 50, dt, dev, -4.0, 4.0), d = out(kRows, dt, dev);
                    be.softmax(d, x, 1, log);
                    return std::vector<Tensor>{d};
                  }});
  }
  cs.push_back({"layer_norm", "", kFloat, {}, [](Backend& be, DType dt, Device dev) {
                  const int64_t r = kRows[0], n = kRows[1];
                  Tensor x = input(kRows, 60, dt, dev, -3.0, 3.0);
                  Tensor w = input({n}, 61, dt, dev, 0.5, 1.5), b = input({n}, 62, dt, dev, -1, 1);
                  Tensor d = out(kRows, dt, dev), mean = out({r}, dt, dev);
                  Tensor rstd = out({r}, dt, dev);
                  be.layer_norm(d, mean, rstd, x, w, b, 1e-5);
                  return std::vector<Tensor>{d, mean, rstd};
                }});
  return cs;
}

double normalized_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

struct Target {
  const char* name;
  Backend* be;
  Device dev;
};
std::vector<Target> targets() {
  std::vector<Target> t{{"cpu", &get_backend(BackendKind::cpu), Device::cpu()}};
  if (cuda_available()) t.push_back({"cuda", &backend_for(Device::cuda(0)), Device::cuda(0)});
  return t;
}

TEST(BackendOps, EveryKernelOfTheTableHasACaseOrNamesItsTest) {
  std::set<std::string> with_case;
  for (const Case& c : cases()) with_case.insert(c.kernel);
  for (const Row& r : table_rows()) {
    const bool here = with_case.count(r.name) > 0, elsewhere = kCoveredElsewhere.count(r.name) > 0;
    EXPECT_TRUE(here || elsewhere) << r.name << ": add a case to " << __FILE__
                                   << " or name the test that covers it in kCoveredElsewhere";
    EXPECT_FALSE(here && elsewhere) << r.name << ": listed twice";
  }
  // And no stale entry: every name above is a row of the table.
  std::set<std::string> rows;
  for (const Row& r : table_rows()) rows.insert(r.name);
  for (const auto& [name, where] : kCoveredElsewhere) EXPECT_TRUE(rows.count(name)) << name;
  for (const std::string& name : with_case) EXPECT_TRUE(rows.count(name)) << name;
}

TEST(BackendOps, EveryCaseMatchesTheRefBackendAndPrintsTheSupportMatrix) {
  const std::vector<Target> ts = targets();
  std::printf("%-16s %-10s", "kernel", "variant");
  for (const Target& t : ts)
    for (DType dt : kPointwise) std::printf(" %5s:%-5s", t.name, std::string(name(dt)).c_str());
  std::printf("\n");
  Backend& ref = get_backend(BackendKind::ref);
  for (const Case& c : cases()) {
    std::printf("%-16s %-10s", c.kernel.c_str(), c.variant.c_str());
    for (const Target& t : ts) {
      for (DType dt : kPointwise) {
        const bool listed = std::find(c.dtypes.begin(), c.dtypes.end(), dt) != c.dtypes.end();
        const char* cell = "";
        if (listed) {
          // The contract's dtypes (backend.h): ref implements them all, so it must not throw.
          const std::vector<Tensor> want = c.run(ref, dt, Device::cpu());
          const uint64_t before = ref_kernel_calls();
          std::vector<Tensor> got;
          try {
            got = c.run(*t.be, dt, t.dev);
          } catch (const std::exception&) {
            got.clear();
          }
          // The case itself runs one ref kernel for unary_backward's dst: not a fallback.
          const uint64_t own = c.kernel == "unary_backward" ? 1 : 0;
          const bool fell_back = t.dev == Device::cpu() && ref_kernel_calls() - before > own;
          if (got.empty()) {
            cell = "-";
          } else {
            double err = 0;
            for (size_t k = 0; k < want.size(); ++k)
              err = std::max(err, normalized_error(got[k].to(Device::cpu()), want[k]));
            EXPECT_LE(err, c.tol.of(dt)) << c.kernel << " " << c.variant << " on " << t.name
                                         << " in " << name(dt);
            cell = err > c.tol.of(dt) ? "FAIL" : fell_back ? "ref" : "ok";
          }
        }
        std::printf(" %11s", cell);
      }
    }
    std::printf("\n");
  }
  // The cpu backend has its own fp32 kernel for every case (the fallbacks are other dtypes).
  for (const Case& c : cases()) {
    const uint64_t before = ref_kernel_calls();
    c.run(get_backend(BackendKind::cpu), DType::fp32, Device::cpu());
    EXPECT_LE(ref_kernel_calls() - before, c.kernel == "unary_backward" ? 1u : 0u)
        << c.kernel << " " << c.variant << " ran " << last_ref_kernel() << " on the cpu in fp32";
  }
}

// The names the profiles and inspect show for the op codes are the table's (observed backend).
TEST(BackendOps, OpCodeNamesComeFromTheTable) {
  EXPECT_STREQ(to_string(UnaryOp::gelu), "gelu");
  EXPECT_STREQ(to_string(UnaryOp::gelu_erf), "gelu_erf");
  EXPECT_STREQ(to_string(BinaryOp::div), "div");
  EXPECT_STREQ(to_string(ScalarOp::rdiv), "rdiv");
  EXPECT_STREQ(to_string(ReduceOp::max), "max");
  EXPECT_STREQ(to_string(static_cast<UnaryOp>(kNumUnaryOps)), "?");
  EXPECT_EQ(unary_backward_reads(UnaryOp::relu), UnaryReads::dst);
  EXPECT_EQ(unary_backward_reads(UnaryOp::gelu), UnaryReads::src);
  EXPECT_EQ(unary_backward_reads(UnaryOp::neg), UnaryReads::none);
}

}  // namespace
}  // namespace mixp
