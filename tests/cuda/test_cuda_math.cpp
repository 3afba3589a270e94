// The arithmetic of the CUDA kernels (src/backend/cuda/math/*.h), compiled here by the host
// compiler and checked against the CPU code it must equal, on every machine: the conversions bit
// for bit against the one encoder (encode_float), the pointwise element functions against the ref
// backend, the optimizer and unscale element rules against the cpu backend's step kernels. What
// the GPU itself computes is checked by test_cuda_device.cpp where a GPU is present.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/math/attention_math.h"
#include "backend/cuda/math/float_encode.h"
#include "backend/cuda/math/pointwise_math.h"
#include "backend/cuda/math/step_math.h"
#include "mixp/backend/backend.h"
#include "mixp/format/float_codec.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp {
namespace {

namespace cm = cuda_math;

struct FormatPair {
  const char* name;
  cm::MiniFormat mini;
  FloatFormat full;
};
std::vector<FormatPair> formats() {
  return {{"tf32", cm::kTf32(), kTf32},       {"bf16", cm::kBf16(), kBf16},
          {"fp16", cm::kFp16(), kFp16},       {"fp8_e4m3", cm::kE4m3(), kFp8E4M3},
          {"fp8_e5m2", cm::kE5m2(), kFp8E5M2}, {"fp6_e2m3", {2, 3, 1, 2}, kFp6E2M3},
          {"fp6_e3m2", {3, 2, 3, 2}, kFp6E3M2}, {"fp4_e2m1", {2, 1, 1, 2}, kFp4E2M1}};
}

// fp32 inputs that reach every branch of the encoder: random bit patterns (all exponents),
// every bf16 value and its neighbours (ties and near-ties of the narrower formats), the
// formats' own values +- one fp32 ulp, zeros, infinities and NaNs with payloads.
std::vector<float> encoder_inputs() {
  std::vector<float> v;
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t u = h << 16;
    v.push_back(std::bit_cast<float>(u));
    v.push_back(std::bit_cast<float>(u | 0x8000));  // exactly half a bf16 ulp: a tie
    v.push_back(std::bit_cast<float>(u | 0x8001));
    v.push_back(std::bit_cast<float>(u | 0x7FFF));
    v.push_back(std::bit_cast<float>(u + 1));
  }
  for (const FormatPair& f : formats()) {
    for (uint32_t b = 0; b < (1U << f.full.bits()); ++b) {
      const float x = static_cast<float>(decode_float(f.full, b));
      v.push_back(x);
      v.push_back(std::nextafter(x, INFINITY));
      v.push_back(std::nextafter(x, -INFINITY));
    }
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4e38f})
    v.push_back(x);
  v.push_back(std::bit_cast<float>(0x7F800001U));  // signalling NaN, payload 1
  v.push_back(std::bit_cast<float>(0xFFC12345U));
  return v;
}

TEST(CudaMath, EncoderEqualsEncodeFloatBitForBit) {
  const std::vector<float> xs = encoder_inputs();
  std::mt19937 rng(99);
  int64_t checked = 0;
  for (const FormatPair& f : formats()) {
    for (Round r : {Round::nearest_even, Round::toward_zero, Round::nearest_away, Round::stochastic}) {
      for (Overflow ov : {Overflow::ieee, Overflow::saturate}) {
        int failures = 0;
        for (float x : xs) {
          const uint32_t bits = r == Round::stochastic ? static_cast<uint32_t>(rng()) : 0;
          const uint32_t want = encode_float(f.full, static_cast<double>(x), r, ov, bits, nullptr);
          const uint32_t got = cm::encode_f32(f.mini, x, r, ov, bits);
          if (got != want && ++failures <= 3) {
            ADD_FAILURE() << f.name << " " << to_string(r) << " " << to_string(ov) << " x=" << x
                          << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ") want 0x"
                          << want << " got 0x" << got << std::dec;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10'000'000);
}

TEST(CudaMath, DecoderEqualsDecodeFloatForEveryPattern) {
  for (const FormatPair& f : formats()) {
    if (f.full.bits() > 16) continue;  // tf32 is stored in fp32's layout: no decode needed
    for (uint32_t b = 0; b < (1U << f.full.bits()); ++b) {
      const double want = decode_float(f.full, b);
      const float got = cm::decode_f32(f.mini, b);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " 0x" << std::hex << b;
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(static_cast<float>(want)))
            << f.name << " NaN payload 0x" << std::hex << b;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(static_cast<float>(want)))
            << f.name << " 0x" << std::hex << b;
      }
    }
  }
}

TEST(CudaMath, Tf32RoundingEqualsTheCpuConverter) {
  const std::vector<float> xs = encoder_inputs();
  Tensor src = from_vector(xs, Shape{static_cast<int64_t>(xs.size())});
  Tensor dst = Tensor::empty(src.shape(), {.dtype = DType::tf32});
  get_backend(BackendKind::ref).convert(dst, src, Round::nearest_even, Overflow::ieee, 0);
  const auto* want = static_cast<const uint32_t*>(dst.data_ptr());
  int failures = 0;
  for (size_t i = 0; i < xs.size() && failures < 3; ++i) {
    const float got = cm::round_tf32(xs[i], Round::nearest_even, Overflow::ieee, 0);
    if (std::bit_cast<uint32_t>(got) != want[i]) {
      ++failures;
      ADD_FAILURE() << "x=" << xs[i] << " want 0x" << std::hex << want[i] << " got 0x"
                    << std::bit_cast<uint32_t>(got);
    }
  }
}

// Values spread over the ops' domains (positive ones for log/sqrt/pow).
std::vector<float> op_inputs(bool positive) {
  std::vector<float> v;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int i = 0; i < 4096; ++i) {
    const float x = n(rng);
    v.push_back(positive ? std::fabs(x) + 1e-3f : x);
  }
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 88.0f, -100.0f})
    v.push_back(positive ? std::fabs(x) + 1.0f : x);
  return v;
}

void expect_bits_equal(const Tensor& want, const std::vector<float>& got, const std::string& what) {
  const auto* w = static_cast<const float*>(want.data_ptr());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 3; ++i) {
    if (std::bit_cast<uint32_t>(w[i]) != std::bit_cast<uint32_t>(got[i]) &&
        !(std::isnan(w[i]) && std::isnan(got[i]))) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": ref " << w[i] << " cuda math " << got[i];
    }
  }
}

TEST(CudaMath, UnaryForwardAndBackwardEqualTheRefBackend) {
  Backend& ref = get_backend(BackendKind::ref);
  for (int op = cm::u_neg; op <= cm::u_gelu_erf; ++op) {
    const bool positive = op == cm::u_log || op == cm::u_sqrt;
    const std::vector<float> xs = op_inputs(positive);
    const Shape sh{static_cast<int64_t>(xs.size())};
    Tensor x = from_vector(xs, sh);
    Tensor y = Tensor::empty(sh);
    ref.unary(static_cast<UnaryOp>(op), y, x);
    std::vector<float> got(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) got[i] = cm::unary_fwd(op, xs[i]);
    expect_bits_equal(y, got, "unary op " + std::to_string(op));

    std::vector<float> gs(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) gs[i] = 0.5f + 0.001f * static_cast<float>(i % 97);
    Tensor g = from_vector(gs, sh);
    Tensor dx = Tensor::empty(sh);
    ref.unary_backward(static_cast<UnaryOp>(op), dx, g, x, y);
    const auto* yv = static_cast<const float*>(y.data_ptr());
    for (size_t i = 0; i < xs.size(); ++i) got[i] = cm::unary_bwd(op, gs[i], xs[i], yv[i]);
    expect_bits_equal(dx, got, "unary backward op " + std::to_string(op));
  }
}

TEST(CudaMath, BinaryAndScalarEqualTheRefBackend) {
  Backend& ref = get_backend(BackendKind::ref);
  const std::vector<float> as = op_inputs(false), bs = op_inputs(true);
  const Shape sh{static_cast<int64_t>(as.size())};
  Tensor a = from_vector(as, sh), b = from_vector(bs, sh);
  std::vector<float> got(as.size());
  for (int op = cm::b_add; op <= cm::b_div; ++op) {
    Tensor y = Tensor::empty(sh);
    ref.binary(static_cast<BinaryOp>(op), y, a, b);
    for (size_t i = 0; i < as.size(); ++i) got[i] = cm::binary_fwd(op, as[i], bs[i]);
    expect_bits_equal(y, got, "binary op " + std::to_string(op));
  }
  for (int op = cm::s_add; op <= cm::s_rdiv; ++op) {
    const double s = 1.75;
    Tensor y = Tensor::empty(sh);
    ref.scalar(static_cast<ScalarOp>(op), y, b, s);
    for (size_t i = 0; i < bs.size(); ++i)
      got[i] = cm::scalar_fwd(op, bs[i], static_cast<float>(s));
    expect_bits_equal(y, got, "scalar op " + std::to_string(op));
  }
}

// The element rules of one optimizer step against the cpu backend's optimizer_update.
struct StepCase {
  UpdateRule rule;
  std::vector<float> w, g, m, v;
};
StepCase step_case(bool adam) {
  StepCase c;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < 5000; ++i) {
    c.w.push_back(n(rng));
    c.g.push_back(0.1f * n(rng));
    c.m.push_back(0.01f * n(rng));
    c.v.push_back(std::fabs(0.001f * n(rng)));
  }
  if (adam) {
    c.rule.kind = UpdateRule::Kind::adam;
    const double b1 = 0.9, b2 = 0.999, lr = 1e-3, step = 3;
    c.rule.s[0] = b1;
    c.rule.s[1] = b2;
    c.rule.s[2] = 1 - b1;
    c.rule.s[3] = 1 - b2;
    c.rule.s[4] = 1e-8;
    c.rule.s[5] = 0;
    c.rule.s[6] = 1 - lr * 0.01;
    c.rule.s[7] = -lr / (1 - std::pow(b1, step));
    c.rule.s[8] = std::sqrt(1 - std::pow(b2, step));
  } else {
    c.rule.kind = UpdateRule::Kind::sgd;
    c.rule.s[0] = 0.05;
    c.rule.s[1] = 1e-4;
    c.rule.s[2] = 0.9;
    c.rule.s[3] = 1.0;
    c.rule.sgd_momentum = true;
    c.rule.sgd_weight_decay = true;
    c.rule.sgd_nesterov = true;
  }
  return c;
}

TEST(CudaMath, OptimizerElementRulesEqualTheCpuBackend) {
  for (bool adam : {true, false}) {
    StepCase c = step_case(adam);
    const Shape sh{static_cast<int64_t>(c.w.size())};
    Tensor w = from_vector(c.w, sh), g = from_vector(c.g, sh), m = from_vector(c.m, sh),
           v = from_vector(c.v, sh);
    const Tensor slots[2] = {m, v};
    ParamUpdate u;
    u.values = w;
    u.grad = g;
    u.slots = std::span<const Tensor>(slots, adam ? 2 : 1);
    get_backend(BackendKind::cpu).optimizer_update(u, c.rule);

    const double* s = c.rule.s;
    const cm::AdamF32 af{static_cast<float>(s[0]), static_cast<float>(s[1]),
                         static_cast<float>(s[2]), static_cast<float>(s[3]),
                         static_cast<float>(s[4]), static_cast<float>(s[5]),
                         static_cast<float>(s[6]), static_cast<float>(s[7]),
                         static_cast<float>(s[8])};
    const cm::SgdF32 sf{static_cast<float>(s[0]), static_cast<float>(s[1]),
                        static_cast<float>(s[2]), static_cast<float>(s[3]), c.rule.sgd_first,
                        c.rule.sgd_nesterov, c.rule.sgd_weight_decay, c.rule.sgd_momentum};
    for (size_t i = 0; i < c.w.size(); ++i) {
      if (adam) {
        cm::adam_element(c.w[i], c.g[i], c.m[i], c.v[i], af);
      } else {
        cm::sgd_element(c.w[i], c.g[i], c.m[i], sf);
      }
    }
    expect_bits_equal(w, c.w, adam ? "adam w" : "sgd w");
    expect_bits_equal(m, c.m, adam ? "adam m" : "sgd momentum");
    if (adam) expect_bits_equal(v, c.v, "adam v");
  }
}

// A bf16 parameter with an fp32 master and stochastic write-back, and one with Kahan
// compensation, as cuda_step.cu's optimizer_kernel computes them element by element.
TEST(CudaMath, NarrowWriteBackAndKahanEqualTheCpuBackend) {
  StepCase c = step_case(true);
  const Shape sh{static_cast<int64_t>(c.w.size())};
  const double* s = c.rule.s;
  const cm::AdamF32 af{static_cast<float>(s[0]), static_cast<float>(s[1]),
                       static_cast<float>(s[2]), static_cast<float>(s[3]),
                       static_cast<float>(s[4]), static_cast<float>(s[5]),
                       static_cast<float>(s[6]), static_cast<float>(s[7]),
                       static_cast<float>(s[8])};
  const uint64_t seed = 0x1234;
  for (bool kahan : {false, true}) {
    Tensor master = from_vector(c.w, sh);
    Tensor param = master.to(DType::bf16, Round::nearest_even, Overflow::ieee, 0);
    Tensor comp = kahan ? zeros(sh, {.dtype = DType::bf16}) : Tensor();
    Tensor g = from_vector(c.g, sh), m = from_vector(c.m, sh), v = from_vector(c.v, sh);
    const std::vector<float> p0 = param.to(DType::fp32).to_vector<float>();
    const Tensor slots[2] = {m, v};
    ParamUpdate u;
    u.chunked = true;
    u.values = param;
    u.grad = g;
    if (kahan) {
      u.comp = comp;
    } else {
      u.master = master;
    }
    u.slots = slots;
    u.write_back = Round::stochastic;
    u.seed = seed;
    get_backend(BackendKind::cpu).optimizer_update(u, c.rule);
    const auto* pbits = static_cast<const uint16_t*>(param.data_ptr());
    const auto* cbits = kahan ? static_cast<const uint16_t*>(comp.data_ptr()) : nullptr;
    int failures = 0;
    std::vector<float> mm = c.m, vv = c.v;
    for (size_t i = 0; i < c.w.size() && failures < 3; ++i) {
      float w = kahan ? p0[i] : c.w[i];
      const float old = w;
      cm::adam_element(w, c.g[i], mm[i], vv[i], af);
      const uint32_t r = sr_bits(seed, i);
      uint32_t p, cb = 0;
      if (!kahan) {
        p = cm::encode_f32(cm::kBf16(), w, Round::stochastic, Overflow::ieee, r);
      } else {
        const float y = cm::kahan_y(w, old, 0.0f);
        p = cm::encode_f32(cm::kBf16(), old + y, Round::stochastic, Overflow::ieee, r);
        const float pn = cm::decode_f32(cm::kBf16(), p);
        cb = cm::encode_f32(cm::kBf16(), cm::kahan_rem(y, pn, old), Round::nearest_even,
                            Overflow::saturate, 0);
      }
      if (p != pbits[i] || (kahan && cb != cbits[i])) {
        ++failures;
        ADD_FAILURE() << (kahan ? "kahan" : "master") << " element " << i << ": cpu 0x"
                      << std::hex << pbits[i] << " cuda math 0x" << p;
      }
    }
  }
}

// The per-row attention of cuda_attention.cu (fp32, online softmax) against the ref backend's
// (double), forward and backward, causal with Tq < Tk (the mask aligned to the end) and not.
TEST(CudaMath, AttentionRowsMatchTheRefBackend) {
  Backend& ref = get_backend(BackendKind::ref);
  for (bool causal : {false, true}) {
    const int64_t B = 2, H = 3, Tq = 5, Tk = 7, D = 8;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    Generator gen(21);
    Tensor q = randn(Shape{B, H, Tq, D}, gen), k = randn(Shape{B, H, Tk, D}, gen),
           v = randn(Shape{B, H, Tk, D}, gen), dout = randn(Shape{B, H, Tq, D}, gen);
    Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty(Shape{B, H, Tq});
    ref.attention(out, lse, q, k, v, causal, scale);
    Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()),
           dv = Tensor::empty(v.shape());
    ref.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, causal, scale);

    const cm::AttnShape a{Tq, Tk, D, causal, static_cast<float>(scale)};
    auto ld = [](const float* p, int64_t i) { return p[i]; };
    auto st = [](float* p, int64_t i, float x) { p[i] = x; };
    auto add = [](float* p, int64_t i, float x) { p[i] += x; };
    const float* Q = q.data<float>();
    const float* K = k.data<float>();
    const float* V = v.data<float>();
    const float* G = dout.data<float>();
    std::vector<float> o(static_cast<size_t>(q.numel())), l(static_cast<size_t>(B * H * Tq));
    std::vector<float> gq(o.size()), gk(static_cast<size_t>(k.numel()), 0.0f), gv(gk.size(), 0.0f);
    for (int64_t bh = 0; bh < B * H; ++bh) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t r = bh * Tq + i;
        l[static_cast<size_t>(r)] = cm::attention_row_forward(
            a, i, Q + r * D, K + bh * Tk * D, V + bh * Tk * D, o.data() + r * D, ld, st);
      }
    }
    for (int64_t bh = 0; bh < B * H; ++bh) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t r = bh * Tq + i;
        cm::attention_row_backward(a, i, Q + r * D, K + bh * Tk * D, V + bh * Tk * D, G + r * D,
                                   o.data() + r * D, l[static_cast<size_t>(r)], gq.data() + r * D,
                                   gk.data() + bh * Tk * D, gv.data() + bh * Tk * D, ld, add, st);
      }
    }
    auto rel = [](const Tensor& want, const std::vector<float>& got) {
      const std::vector<double> w = want.to_double_vector();
      double num = 0, den = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        num += (got[i] - w[i]) * (got[i] - w[i]);
        den += w[i] * w[i];
      }
      return std::sqrt(num / den);
    };
    // fp32 against double over D = 8 products and 7 keys: a few fp32 ulps.
    EXPECT_LT(rel(out, o), 1e-6) << "causal " << causal;
    EXPECT_LT(rel(lse, l), 1e-6) << "causal " << causal;
    EXPECT_LT(rel(dq, gq), 1e-5) << "causal " << causal;
    EXPECT_LT(rel(dk, gk), 1e-5) << "causal " << causal;
    EXPECT_LT(rel(dv, gv), 1e-5) << "causal " << causal;
  }
}

TEST(CudaMath, UnscaleFindsWhatTheCpuBackendFinds) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    Tensor g = from_vector(std::vector<float>{1.0f, bad, 2.0f}, Shape{3});
    Tensor found = zeros(Shape{1});
    get_backend(BackendKind::cpu).unscale_check(g, found, 0.5);
    EXPECT_EQ(found.item(), 1.0);
    EXPECT_TRUE(cm::non_finite(bad));
  }
  EXPECT_FALSE(cm::non_finite(3.4e38f));
  EXPECT_FALSE(cm::non_finite(-0.0f));
}

}  // namespace
}  // namespace mixp
