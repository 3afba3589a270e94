// The arithmetic of the CUDA scaling, quantization and statistics kernels
// (src/backend/cuda/math/quant_math.h, launched by cuda_quant.cu), compiled here by the host
// compiler and run the way the kernels run it (the same element functions, the same block and
// run splits, the same merge order), bit for bit against the ref backend, the oracle the cpu
// backend is held to: amax, minmax, quantize (fp8 per tensor, MX blocks, integer fake quant),
// mask_grad, the low-bit codes and their gradient, scale_bias_act, fp8_scale_update,
// count_nonfinite, binary_cross_entropy. test_cuda_device.cpp runs the kernels themselves on a
// GPU against the cpu backend.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/math/quant_math.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

namespace cm = cuda_math;

// Values over many binades with the special cases the kernels must keep: signed zeros, ties of
// the fp8 grids, values beyond fp8's range, subnormals, and (when `specials`) inf and NaN.
std::vector<float> inputs(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 12);
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) v.push_back(std::ldexp(nd(rng), ex(rng)));
  const float fixed[] = {0.0f,   -0.0f,     0.5f,   -1.5f,   448.0f,     464.0f,
                         500.0f, -57344.0f, 1e-40f, -3e-39f, 0.0078125f, 0.01171875f,
                         2.5f,   3.5f,      -2.5f,  1.0f,    -1.0f,      1e30f};
  for (size_t i = 0; i < std::size(fixed) && i < v.size(); ++i) v[i * 7 % v.size()] = fixed[i];
  if (specials && v.size() > 100) {
    v[11] = NAN;
    v[40] = INFINITY;
    v[77] = -INFINITY;
  }
  return v;
}

template <class T>
void expect_same(const Tensor& want, const std::vector<T>& got, const std::string& what) {
  ASSERT_EQ(want.nbytes(), got.size() * sizeof(T)) << what;
  const auto* w = static_cast<const T*>(want.data_ptr());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (std::memcmp(&w[i], &got[i], sizeof(T)) != 0) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": ref " << +w[i] << " cuda math " << +got[i];
    }
  }
}

Backend& ref() {
  return get_backend(BackendKind::ref);
}

TEST(CudaQuantMath, AmaxAndMinmaxEqualTheRefBackend) {
  for (bool specials : {false, true}) {
    const std::vector<float> x = inputs(6000, 3, specials);
    Tensor src = from_vector(x, Shape{6000});
    Tensor a = Tensor::empty(Shape{1});
    ref().amax(a, src);
    uint32_t key = 0;
    for (float v : x) key = std::max(key, cm::amax_key(v));
    expect_same(a, std::vector<float>{cm::bits_f32(key)}, "amax");

    // minmax per channel of [outer, channels, inner], merged from runs of 37 elements in order
    // (the kernel's runs and thread ranges are other splits of the same sequence).
    for (auto [channels, inner] : {std::pair<int64_t, int64_t>{1, 6000}, {3, 10}, {12, 1}}) {
      Tensor mn = Tensor::empty(Shape{channels}), mx = Tensor::empty(Shape{channels});
      ref().minmax(mn, mx, src, channels, inner);
      const int64_t outer = 6000 / (channels * inner), count = outer * inner;
      std::vector<float> gmn, gmx;
      for (int64_t c = 0; c < channels; ++c) {
        cm::MinMaxAcc total = cm::minmax_init();
        for (int64_t lo = 0; lo < count; lo += 37) {
          cm::MinMaxAcc run = cm::minmax_init();
          for (int64_t j = lo; j < std::min(count, lo + 37); ++j) {
            const int64_t o = j / inner, k = j % inner;
            cm::minmax_add(run, x[static_cast<size_t>((o * channels + c) * inner + k)]);
          }
          total = cm::minmax_merge(total, run);
        }
        gmn.push_back(cm::minmax_min(total));
        gmx.push_back(cm::minmax_max(total));
      }
      const std::string what = "minmax channels " + std::to_string(channels);
      if (!specials) {
        expect_same(mn, gmn, what + " min");
        expect_same(mx, gmx, what + " max");
      } else {
        for (int64_t c = 0; c < channels; ++c) {
          EXPECT_EQ(std::isnan(mn.data<float>()[c]), std::isnan(gmn[static_cast<size_t>(c)]));
          if (!std::isnan(gmn[static_cast<size_t>(c)])) {
            EXPECT_EQ(mn.data<float>()[c], gmn[static_cast<size_t>(c)]) << what;
          }
        }
      }
    }
  }
}

// quantize fp8_tensor into fp8 codes (the dst of a backend with fp8_matmul(), whose FP8 GEMMs
// read them): the code is the byte of mixp's own fp8 dtype for x * scale (saturating, nearest
// even; what Tensor::to writes and cuBLASLt reads), and the bf16 kernel's value is that code's.
TEST(CudaQuantMath, Fp8TensorCodesAreTheDtypesBytesOfTheBf16Values) {
  const std::vector<float> x = inputs(70 * 45, 9, true);
  for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const bool e5m2 = f == DType::fp8_e5m2;
    for (float scale : {1.0f, 3.0f, 1024.0f, 0.001f}) {
      std::vector<float> scaled;
      for (float v : x) scaled.push_back(v * scale);  // the kernel's fp32 product
      const Tensor want =
          from_vector(scaled, Shape{static_cast<int64_t>(x.size())})
              .to(f, Round::nearest_even, Overflow::saturate, 0);
      const auto* w = static_cast<const uint8_t*>(want.data_ptr());
      int bad = 0;
      for (size_t i = 0; i < x.size() && bad < 5; ++i) {
        const uint8_t code = cm::fp8_tensor_code(x[i], scale, e5m2);
        if (code != w[i]) {
          ++bad;
          ADD_FAILURE() << name(f) << " code of " << x[i] << " * " << scale << ": "
                        << int(code) << " != " << int(w[i]);
        }
        const cm::MiniFormat mf = e5m2 ? cm::kE5m2() : cm::kE4m3();
        EXPECT_EQ(cm::fp8_tensor_element(x[i], scale, e5m2), cm::bf16_rne(cm::decode_f32(mf, code)));
      }
    }
  }
}

TEST(CudaQuantMath, QuantizeKindsEqualTheRefBackend) {
  const std::vector<float> x = inputs(70 * 45, 5, true);
  Tensor src = from_vector(x, Shape{45, 70});
  for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const bool e5m2 = f == DType::fp8_e5m2;
    for (float scale : {1.0f, 3.0f, 1024.0f, 0.001f}) {
      QuantizeSpec spec;
      spec.kind = QuantizeSpec::Kind::fp8_tensor;
      spec.format = f;
      spec.scale = scale;
      Tensor dst = Tensor::empty(src.shape(), {.dtype = DType::bf16});
      Tensor amax = Tensor::empty(Shape{1});
      ref().quantize(spec, dst, amax, src);
      std::vector<uint16_t> got;
      for (float v : x) got.push_back(cm::fp8_tensor_element(v, scale, e5m2));
      expect_same(dst, got, std::string("fp8_tensor ") + std::string(name(f)));
    }
    // MX: rows of 70 in blocks of 32 and 16 (partial last blocks), a block with a NaN/inf.
    for (int block : {32, 16, 7}) {
      QuantizeSpec spec;
      spec.kind = QuantizeSpec::Kind::fp8_mx;
      spec.format = f;
      spec.block = block;
      Tensor dst = Tensor::empty(src.shape(), {.dtype = DType::bf16});
      Tensor none;
      ref().quantize(spec, dst, none, src);
      std::vector<uint16_t> got(x.size());
      const int64_t row_len = 70, per_row = (row_len + block - 1) / block;
      for (int64_t b = 0; b < 45 * per_row; ++b) {
        const int64_t r = b / per_row, j = b % per_row;
        const int64_t begin = r * row_len + j * block,
                      len = std::min<int64_t>(block, row_len - j * block);
        uint32_t amax = 0;
        for (int64_t k = 0; k < len; ++k)
          amax = std::max(amax, cm::mx_abs_bits(x[static_cast<size_t>(begin + k)]));
        const int s = cm::mx_block_exponent(amax, e5m2);
        for (int64_t k = 0; k < len; ++k)
          got[static_cast<size_t>(begin + k)] =
              cm::mx_element(x[static_cast<size_t>(begin + k)], s, e5m2);
      }
      expect_same(
          dst, got,
          std::string("fp8_mx ") + std::string(name(f)) + " block " + std::to_string(block));
    }
  }
  // Integer fake quantization per tensor and per channel (channels on dim 0, inner 70).
  const std::vector<QuantizeSpec::IntParams> per_tensor = {
      {0.05f, 1.0f / 0.05f, 3.0f, -128.0f, 127.0f}};
  std::vector<QuantizeSpec::IntParams> per_channel;
  for (int c = 0; c < 45; ++c) {
    const float s = 0.001f * static_cast<float>(c + 1);
    per_channel.push_back({s, 1.0f / s, static_cast<float>(c % 5) - 2.0f, c % 2 ? 0.0f : -8.0f,
                           c % 2 ? 255.0f : 7.0f});
  }
  const std::vector<QuantizeSpec::IntParams>* const param_sets[] = {&per_tensor, &per_channel};
  for (const std::vector<QuantizeSpec::IntParams>* params : param_sets) {
    QuantizeSpec spec;
    spec.kind = QuantizeSpec::Kind::int_fake;
    spec.params = *params;
    spec.channels = static_cast<int64_t>(params->size());
    spec.inner = params->size() == 1 ? x.size() : 70;
    Tensor dst = Tensor::empty(src.shape()),
           mask = Tensor::empty(src.shape(), {.dtype = DType::uint8});
    ref().quantize(spec, dst, mask, src);
    std::vector<float> got;
    std::vector<uint8_t> gm;
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = spec.inner ? (static_cast<int64_t>(i) / spec.inner) % spec.channels : 0;
      const auto& p = (*params)[static_cast<size_t>(c)];
      uint8_t in = 0;
      got.push_back(cm::int_fake_element(x[i], p.scale, p.zero_point, p.qmin, p.qmax, &in));
      gm.push_back(in);
    }
    expect_same(dst, got, "int_fake channels " + std::to_string(params->size()));
    expect_same(mask, gm, "int_fake mask channels " + std::to_string(params->size()));
  }
}

TEST(CudaQuantMath, LowBitCodesAndGradientsEqualTheRefBackend) {
  using Kind = LowBitCodesSpec::Kind;
  const int64_t O = 24, K = 50;
  std::vector<float> w = inputs(static_cast<size_t>(O * K), 9, false);
  for (float& v : w) v = v * 0.01f;
  w[5] = 1.7f;  // outside the binary mask
  Tensor src = from_vector(w, Shape{O, K});
  for (Kind kind : {Kind::weight_int, Kind::weight_ternary, Kind::weight_binary, Kind::act_int,
                    Kind::act_sign}) {
    LowBitCodesSpec spec;
    spec.kind = kind;
    spec.qmin = kind == Kind::act_int ? 0.0f : -8.0f;
    spec.qmax = kind == Kind::act_int ? 15.0f : 7.0f;
    spec.scale = 0.003f;
    Tensor codes = Tensor::empty(src.shape()), scales = Tensor::empty(Shape{O}),
           mask = Tensor::empty(src.shape(), {.dtype = DType::uint8});
    ref().lowbit_codes(spec, codes, scales, mask, src);
    std::vector<float> gc(w.size()), gs(static_cast<size_t>(O), 0.0f);
    std::vector<uint8_t> gm(w.size());
    const std::string what = "lowbit kind " + std::to_string(static_cast<int>(kind));
    switch (kind) {
      case Kind::weight_int:
        for (int64_t o = 0; o < O; ++o) {
          float mn = 0.0f, mx = 0.0f;  // the kernel's per-thread rule (order does not matter)
          for (int64_t k = 0; k < K; ++k) {
            const float v = w[static_cast<size_t>(o * K + k)];
            mn = v < mn ? v : mn;
            mx = mx < v ? v : mx;
          }
          const float s = cm::lowbit_row_scale(mn, mx, spec.qmin, spec.qmax);
          gs[static_cast<size_t>(o)] = s;
          for (int64_t k = 0; k < K; ++k) {
            const auto i = static_cast<size_t>(o * K + k);
            gc[i] = cm::lowbit_int_code(w[i], 1.0f / s, spec.qmin, spec.qmax, &gm[i]);
          }
        }
        break;
      case Kind::weight_ternary: {
        double sum = 0;
        for (float v : w) sum += std::fabs(static_cast<double>(v));
        const float delta = cm::ternary_delta(sum, O * K);
        double above = 0;
        int64_t count = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          gc[i] = cm::ternary_code(w[i], delta);
          gm[i] = 1;
          if (gc[i] != 0.0f) {
            above += std::fabs(static_cast<double>(w[i]));
            ++count;
          }
        }
        std::fill(gs.begin(), gs.end(), cm::mean_abs_scale(above, count));
        break;
      }
      case Kind::weight_binary:
        for (int64_t o = 0; o < O; ++o) {
          double sum = 0;
          for (int64_t k = 0; k < K; ++k)
            sum += std::fabs(static_cast<double>(w[static_cast<size_t>(o * K + k)]));
          gs[static_cast<size_t>(o)] = cm::mean_abs_scale(sum, K);
        }
        [[fallthrough]];
      case Kind::act_sign:
        for (size_t i = 0; i < w.size(); ++i) gc[i] = cm::lowbit_sign_code(w[i], &gm[i]);
        break;
      case Kind::act_int:
        for (size_t i = 0; i < w.size(); ++i)
          gc[i] = cm::lowbit_int_code(w[i], 1.0f / spec.scale, spec.qmin, spec.qmax, &gm[i]);
        break;
    }
    expect_same(codes, gc, what + " codes");
    expect_same(mask, gm, what + " mask");
    if (kind != Kind::act_int && kind != Kind::act_sign) expect_same(scales, gs, what + " scales");

    // The straight-through gradient, per row.
    std::vector<float> inv(static_cast<size_t>(O)), g = inputs(w.size(), 10, true);
    for (int64_t o = 0; o < O; ++o)
      inv[static_cast<size_t>(o)] = 1.0f / (0.01f + static_cast<float>(o));
    Tensor dsrc = Tensor::empty(src.shape());
    ref().lowbit_codes_backward(dsrc, from_vector(g, src.shape()), mask, from_vector(inv, Shape{O}),
                                K);
    std::vector<float> gd;
    for (size_t i = 0; i < w.size(); ++i)
      gd.push_back(
          cm::lowbit_ste(g[i], gm[i], inv[(i / static_cast<size_t>(K)) % static_cast<size_t>(O)]));
    expect_same(dsrc, gd, what + " backward");
  }
}

TEST(CudaQuantMath, MaskGradAndScaleBiasActEqualTheRefBackend) {
  const std::vector<float> g = inputs(4000, 11, true), y = inputs(4000, 12, true);
  std::vector<uint8_t> m8;
  for (size_t i = 0; i < g.size(); ++i) m8.push_back(i % 3 ? 1 : 0);
  Tensor mask8 = Tensor::empty(Shape{4000}, {.dtype = DType::uint8});
  std::memcpy(mask8.data_ptr(), m8.data(), m8.size());
  Tensor d = Tensor::empty(Shape{4000});
  ref().mask_grad(d, from_vector(g, Shape{4000}), mask8);
  std::vector<float> got;
  for (size_t i = 0; i < g.size(); ++i) got.push_back(cm::ste_u8(g[i], m8[i]));
  expect_same(d, got, "mask_grad uint8");
  ref().mask_grad(d, from_vector(g, Shape{4000}), from_vector(y, Shape{4000}));
  got.clear();
  for (size_t i = 0; i < g.size(); ++i) got.push_back(cm::ste_relu(g[i], y[i]));
  expect_same(d, got, "mask_grad relu");

  const std::vector<float> bias = inputs(80, 13, false);
  Tensor src = from_vector(g, Shape{50, 80}), b = from_vector(bias, Shape{80});
  for (bool with_bias : {false, true}) {
    for (Activation act : {Activation::none, Activation::relu}) {
      Tensor dst = Tensor::empty(src.shape());
      ref().scale_bias_act(dst, src, with_bias ? b : Tensor(), 0.37f, act);
      got.clear();
      for (size_t i = 0; i < g.size(); ++i)
        got.push_back(cm::scale_bias_act_element(g[i], 0.37f, with_bias ? &bias[i % 80] : nullptr,
                                                 act == Activation::relu));
      expect_same(dst, got,
                  "scale_bias_act bias " + std::to_string(with_bias) + " act " +
                      std::to_string(static_cast<int>(act)));
    }
  }
}

TEST(CudaQuantMath, Fp8ScaleUpdateEqualsTheRefBackend) {
  const std::vector<float> hist = {3.0f, 0.5f, 7.0f, 0.0f, 2.0f};
  struct Case {
    bool roll, most_recent;
    float amax, fp8_max;
    int margin;
    float scale0;
  };
  for (const Case& c :
       {Case{false, false, 9.0f, 448.0f, 0, 1.0f}, Case{false, false, NAN, 448.0f, 0, 1.0f},
        Case{true, false, 0, 448.0f, 0, 2.0f}, Case{true, true, 0, 57344.0f, 2, 2.0f},
        Case{true, false, 0, 448.0f, -3, 5.0f}}) {
    for (const std::vector<float>& h0 :
         {hist, std::vector<float>{0, 0, 0}, std::vector<float>{1e-40f, 0}}) {
      Tensor h = from_vector(h0, Shape{static_cast<int64_t>(h0.size())});
      Tensor s = from_vector(std::vector<float>{c.scale0}, Shape{1}), si = Tensor::empty(Shape{1});
      si.data<float>()[0] = 0.0f;
      ref().fp8_scale_update(h, s, si,
                             {.roll = c.roll,
                              .amax = c.amax,
                              .most_recent = c.most_recent,
                              .fp8_max = c.fp8_max,
                              .margin = c.margin});
      std::vector<float> gh = h0, gs = {c.scale0}, gsi = {0.0f};
      cm::fp8_scale_update_state(gh.data(), static_cast<int64_t>(gh.size()), gs.data(), gsi.data(),
                                 c.roll, c.amax, c.most_recent, c.fp8_max, c.margin);
      expect_same(h, gh, "history");
      expect_same(s, gs, "scale");
      expect_same(si, gsi, "scale_inv");
      EXPECT_EQ(
          std::bit_cast<uint32_t>(cm::fp8_scale_from_amax_f(c.amax, c.fp8_max, c.margin, c.scale0)),
          std::bit_cast<uint32_t>(fp8_scale_from_amax(c.amax, c.fp8_max, c.margin, c.scale0)));
    }
  }
}

TEST(CudaQuantMath, CountNonfiniteEqualsTheRefBackend) {
  const std::vector<float> x = inputs(3000, 14, true);
  Tensor src = from_vector(x, Shape{30, 100});
  for (DType t : {DType::fp32, DType::bf16, DType::fp16, DType::fp64}) {
    Tensor v = src.to(t, Round::nearest_even, Overflow::ieee, 0).transpose(0, 1);  // strided
    Tensor dst = Tensor::empty(Shape{2}, {.dtype = DType::int64});
    ref().count_nonfinite(dst, v);
    const Tensor c = v.contiguous();
    int64_t nan = 0, inf = 0;
    for (int64_t i = 0; i < c.numel(); ++i) {
      uint64_t bits = 0, em = 0, mm = 0;
      switch (t) {
        case DType::fp32:
          bits = static_cast<const uint32_t*>(c.data_ptr())[i], em = 0x7F800000u, mm = 0x7FFFFFu;
          break;
        case DType::fp64:
          bits = static_cast<const uint64_t*>(c.data_ptr())[i], em = 0x7FF0000000000000ull,
          mm = 0xFFFFFFFFFFFFFull;
          break;
        case DType::bf16:
          bits = static_cast<const uint16_t*>(c.data_ptr())[i], em = 0x7F80, mm = 0x7F;
          break;
        default:
          bits = static_cast<const uint16_t*>(c.data_ptr())[i], em = 0x7C00, mm = 0x3FF;
          break;
      }
      const int k = cm::nonfinite_class(bits, em, mm);
      nan += k == 0;
      inf += k == 1;
    }
    EXPECT_GE(nan + inf, 3) << name(t);  // fp16 overflows some of the large values to inf too
    expect_same(dst, std::vector<int64_t>{nan, inf},
                std::string("count_nonfinite ") + std::string(name(t)));
  }
}

TEST(CudaQuantMath, BinaryCrossEntropyEqualsTheRefBackend) {
  std::mt19937 rng(15);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> nd(0.0, 4.0);
  for (DType dt : {DType::fp32, DType::fp64}) {
    for (bool logits : {false, true}) {
      std::vector<double> xs, ts;
      for (int i = 0; i < 777; ++i) {
        xs.push_back(logits ? nd(rng) : u(rng));
        ts.push_back(i % 3 == 0 ? 1.0 : (i % 3 == 1 ? 0.0 : u(rng)));
      }
      xs[3] = logits ? 0.0 : 1.0;  // a clamped log
      xs[4] = 0.0;
      Tensor x = from_vector(xs, Shape{777}).to(dt), t = from_vector(ts, Shape{777}).to(dt);
      Tensor loss = Tensor::empty(Shape{}, {.dtype = dt});
      ref().binary_cross_entropy(loss, x, t, logits);
      Tensor dloss = from_vector(std::vector<double>{0.75}, Shape{1}).to(dt);
      Tensor dx = Tensor::empty(x.shape(), {.dtype = dt}),
             dtg = Tensor::empty(x.shape(), {.dtype = dt});
      ref().binary_cross_entropy_backward(dx, dtg, dloss, x, t, logits);
      const std::vector<double> xv = x.to_double_vector(), tv = t.to_double_vector();
      double acc = 0;
      for (size_t i = 0; i < xv.size(); ++i) acc = cm::bce_accumulate(acc, xv[i], tv[i], logits);
      const double scale = dloss.to_double_vector()[0] / 777.0;
      const std::string what = std::string(name(dt)) + (logits ? " logits" : " probabilities");
      auto check = [&](auto zero) {
        using T = decltype(zero);
        expect_same(loss, std::vector<T>{static_cast<T>(acc / 777.0)}, what + " loss");
        std::vector<T> gdx, gdt;
        for (size_t i = 0; i < xv.size(); ++i) {
          gdx.push_back(static_cast<T>(scale * cm::bce_dx(xv[i], tv[i], logits)));
          gdt.push_back(static_cast<T>(scale * cm::bce_dtarget(xv[i], logits)));
        }
        expect_same(dx, gdx, what + " dx");
        expect_same(dtg, gdt, what + " dtarget");
      };
      if (dt == DType::fp32)
        check(0.0f);
      else
        check(0.0);
    }
  }
}

}  // namespace
}  // namespace mixp
