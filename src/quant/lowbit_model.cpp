// PackedModel: the packed low-bit model and its forward; see include/mixp/quant/lowbit_model.h
// (convert_to_packed, which builds one, is in lowbit_convert.cpp).
#include "mixp/quant/lowbit_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/host_parallel.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/tensor/factories.h"
#include "quant/lowbit_runtime.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {
int64_t conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  return (in + 2 * pad - k) / stride + 1;
}
}  // namespace

PackedModel::PackedModel() : nn::Module("packed_model") {
  train(false);
}
PackedModel::~PackedModel() = default;

void PackedModel::add_step(PackedStep s) {
  auto rt = std::make_unique<Runtime>();
  if (s.kind == "layer") {
    const int64_t K = s.in * s.kernel * s.kernel;
    if (s.out <= 0 || K <= 0 || static_cast<int64_t>(s.weight_scale.size()) != s.out ||
        static_cast<int64_t>(s.packed.size()) !=
            (s.scheme == LowBitScheme::ternary ? 2 : 1) * s.out * packed_row_bytes(K, s.scheme)) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::PackedModel: layer '{}' has {} packed bytes and {} scales for {} x {} {} "
          "weights",
          s.name, s.packed.size(), s.weight_scale.size(), s.out, K, name(s.scheme)));
    }
    if (s.bias.defined() && s.bias.numel() != s.out) {
      throw std::invalid_argument(
          fmt::format("mixp::quant::PackedModel: layer '{}' has {} biases for {} outputs", s.name,
                      s.bias.numel(), s.out));
    }
    rt->w8 = unpack_weight_codes(s.packed.data(), s.out, K, s.scheme);
    if (s.scheme == LowBitScheme::binary_act) {
      // Convolutions order their bits (kh, kw, ci), so that the C sign bits of one input
      // position are contiguous (see LayerRun::conv); a dot product does not depend on the order.
      rt->words = (K + 63) / 64;
      rt->bits.assign(static_cast<size_t>(s.out * rt->words), 0);
      const int64_t C = s.in, KS = s.kernel;
      for (int64_t o = 0; o < s.out; ++o) {
        for (int64_t k = 0; k < K; ++k) {
          const int64_t bit = s.conv ? (k % (KS * KS)) * C + k / (KS * KS) : k;
          if (rt->w8[static_cast<size_t>(o * K + k)] < 0) {
            rt->bits[static_cast<size_t>(o * rt->words + bit / 64)] |= uint64_t{1} << (bit % 64);
          }
        }
      }
    }
    if (s.conv && s.scheme == LowBitScheme::binary_act) {
      rt->xconv = pack_xnor_conv_weights(rt->w8.data(), s.out, s.in, s.kernel);
    }
    if (s.conv && s.scheme != LowBitScheme::binary_act) {
      rt->w8_oihw = empty(Shape{s.out, s.in, s.kernel, s.kernel}, {.dtype = DType::int8});
      std::copy(rt->w8.begin(), rt->w8.end(), rt->w8_oihw.data<int8_t>());
      rt->wsum.assign(static_cast<size_t>(s.out), 0);
      for (int64_t o = 0; o < s.out; ++o) {
        for (int64_t k = 0; k < K; ++k)
          rt->wsum[static_cast<size_t>(o)] += rt->w8[static_cast<size_t>(o * K + k)];
      }
    }
    if (s.scheme == LowBitScheme::int4 || s.scheme == LowBitScheme::int2) {
      rt->lowb = pack_lowbit_b(s.packed.data(), s.out, K, weight_bits(s.scheme));
    }
    rt->mult.resize(static_cast<size_t>(s.out));
    for (size_t o = 0; o < rt->mult.size(); ++o) rt->mult[o] = s.input_scale * s.weight_scale[o];
  }
  steps_.push_back(std::move(s));
  rt_.push_back(std::move(rt));
  fused::plan_sign_epilogue(steps_, rt_, steps_.size() - 1);
}

int64_t PackedModel::weight_bytes() const {
  int64_t b = 0;
  for (const PackedStep& s : steps_) {
    b += static_cast<int64_t>(s.packed.size()) + 4 * static_cast<int64_t>(s.weight_scale.size());
    for (const Tensor* t : {&s.bias, &s.running_mean, &s.running_var, &s.gamma, &s.beta}) {
      if (t->defined()) b += static_cast<int64_t>(t->nbytes());
    }
  }
  return b;
}

bool PackedModel::sign_fused(size_t i) const {
  return i < rt_.size() && rt_[i]->fuse_sign;
}

std::string PackedModel::describe() const {
  std::string s;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const PackedStep& st = steps_[i];
    s += fmt::format("{}{}({}{}{}{})", s.empty() ? "" : ", ", st.kind, st.name,
                     st.kind == "layer" ? " " : "", st.kind == "layer" ? name(st.scheme) : "",
                     sign_fused(i) ? ", sign bits by thresholds" : "");
  }
  return "packed: " + s;
}

namespace {

// Codes -> s32 sums of a layer, as fp32 [N, O] or [N, O, OH, OW].
struct LayerRun {
  const PackedStep& s;
  PackedModel::Runtime& rt;  // NOLINT (a view for one call)

  bool binary() const { return s.scheme == LowBitScheme::binary_act; }
  bool src_signed() const { return s.input_kind != ActCodeKind::unsigned_bits; }

  // One row of K codes into bits (binary-act) or bytes; `at(k)` gives the code, NaN for padding.
  template <class F>
  void fill_row(int64_t K, F at, uint64_t* bits, uint8_t* bytes) const {
    if (bits) {
      for (int64_t w = 0; w < rt.words; ++w) bits[w] = 0;
      for (int64_t k = 0; k < K; ++k) {
        if (at(k) < 0.0f) bits[k / 64] |= uint64_t{1} << (k % 64);  // padding (0) reads as +1
      }
    } else if (src_signed()) {
      for (int64_t k = 0; k < K; ++k) {
        bytes[k] = static_cast<uint8_t>(static_cast<int8_t>(at(k)));
      }
    } else {
      for (int64_t k = 0; k < K; ++k) bytes[k] = static_cast<uint8_t>(at(k));
    }
  }

  // acc [M, O] int32 from rows prepared by `fill(m, bits, bytes)`. The buffers come from the
  // caching allocator (uninitialized: every byte is written).
  // With `sign_out` (binary-act, fused): no sums; their sign bits [M, ceil(O / 64)] words go
  // there instead, row m compared with thr_rows[m] (xnor_sign_bits).
  template <class F>
  Tensor gemm(int64_t M, int64_t K, F fill, uint64_t* sign_out = nullptr,
              const int32_t* const* thr_rows = nullptr) const {
    const int64_t O = s.out;
    Tensor acc;
    if (!sign_out) acc = empty(Shape{M, O}, {.dtype = DType::int32});
    if (binary()) {
      Tensor at = empty(Shape{M, rt.words}, {.dtype = DType::int64});
      auto* a = reinterpret_cast<uint64_t*>(at.data_ptr());
      host_parallel_for(M, M * K, [&](int64_t lo, int64_t hi) {
        for (int64_t m = lo; m < hi; ++m) fill(m, a + m * rt.words, nullptr);
      });
      if (sign_out) {
        xnor_sign_bits(sign_out, a, rt.bits.data(), M, O, rt.words, static_cast<int32_t>(K),
                       thr_rows, rt.flip.data());
      } else {
        xnor_gemm_s32(acc.data<int32_t>(), a, rt.bits.data(), M, O, rt.words,
                      static_cast<int32_t>(K));
      }
    } else {
      Tensor at = empty(Shape{M, K}, {.dtype = DType::uint8});
      uint8_t* a = at.data<uint8_t>();
      host_parallel_for(M, M * K, [&](int64_t lo, int64_t hi) {
        for (int64_t m = lo; m < hi; ++m) fill(m, nullptr, a + m * K);
      });
      if (rt.lowb && !src_signed()) {
        // int4/int2 codes expanded in registers (bit-identical to the int8 GEMM of w8).
        lowbit_gemm_s32(acc.data<int32_t>(), a, K, *rt.lowb, M);
      } else {
        int8_gemm_s32(acc.data<int32_t>(), a, src_signed(), rt.w8.data(), M, O, K);
      }
    }
    return acc;
  }

  // acc [N, O] s32 of a linear layer from fp32 codes.
  Tensor linear_acc(const Tensor& x) const {
    const int64_t K = s.in;
    if (x.dim() != 2 || x.size(1) != K) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::PackedModel: layer '{}' expects [N, {}] codes, got {}", s.name, K,
          x.shape().str()));
    }
    const float* xp = x.data<float>();
    return gemm(x.size(0), K, [&](int64_t m, uint64_t* bits, uint8_t* bytes) {
      fill_row(K, [&](int64_t k) { return xp[m * K + k]; }, bits, bytes);
    });
  }

  // acc [N, O] s32 of a binary-act linear from sign bits (the fused path).
  Tensor linear_acc(const fused::BitMap& x) const {
    const std::vector<uint64_t>& wb = fused::linear_weight_bits(x, s, rt);
    Tensor rows = empty(Shape{x.N, rt.words}, {.dtype = DType::int64});
    auto* a = reinterpret_cast<uint64_t*>(rows.data_ptr());
    fused::linear_rows(x, a, rt.words);
    Tensor acc = empty(Shape{x.N, s.out}, {.dtype = DType::int32});
    xnor_gemm_s32(acc.data<int32_t>(), a, wb.data(), x.N, s.out, rt.words,
                  static_cast<int32_t>(s.in));
    return acc;
  }

  // The sum over the padded positions of a border pattern (rows/columns cut at each side) of
  // the weight codes, per output channel: what +1 at those positions added to the XNOR sum.
  const std::vector<int32_t>& correction(const std::array<int64_t, 4>& pat) const {
    auto it = rt.corr.find(pat);
    if (it != rt.corr.end()) return it->second;
    const int64_t C = s.in, KS = s.kernel, K = C * KS * KS;
    std::vector<int32_t> c(static_cast<size_t>(s.out), 0);
    for (int64_t o = 0; o < s.out; ++o) {
      for (int64_t ci = 0; ci < C; ++ci) {
        for (int64_t kh = 0; kh < KS; ++kh) {
          for (int64_t kw = 0; kw < KS; ++kw) {
            const bool pad = kh < pat[0] || kh >= KS - pat[1] || kw < pat[2] || kw >= KS - pat[3];
            if (pad)
              c[static_cast<size_t>(o)] +=
                  rt.w8[static_cast<size_t>(o * K + (ci * KS + kh) * KS + kw)];
          }
        }
      }
    }
    return rt.corr.emplace(pat, std::move(c)).first->second;
  }

  // An int-path conv on oneDNN's exact VNNI int8 convolution (int8_conv2d_s32): the codes go
  // to NHWC u8 with the padding made explicit, and s8 codes are shifted by +128 (padding with
  // 128, the shifted 0); the caller subtracts the shift's 128 * sum(w[o]) (or moves its
  // thresholds by it). Returns [N, OH, OW, O] s32.
  Tensor conv_onednn_acc(const Tensor& x) const {
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t P = s.padding, HP = H + 2 * P, WP = W + 2 * P;
    const bool sgn = src_signed();
    const uint8_t fill = sgn ? 128 : 0;
    Tensor src = empty(Shape{N, HP, WP, C}, {.dtype = DType::uint8});
    const float* xp = x.data<float>();
    uint8_t* sp = src.data<uint8_t>();
    host_parallel_for(N * HP, N * HP * WP * C, [&](int64_t lo, int64_t hi) {
      for (int64_t nh = lo; nh < hi; ++nh) {
        const int64_t n = nh / HP, h = nh % HP - P;
        uint8_t* row = sp + nh * WP * C;
        if (h < 0 || h >= H) {
          std::memset(row, fill, static_cast<size_t>(WP * C));
          continue;
        }
        for (int64_t w = 0; w < WP; ++w) {
          const int64_t wi = w - P;
          for (int64_t c = 0; c < C; ++c) {
            const float v = wi < 0 || wi >= W ? 0.0f : xp[((n * C + c) * H + h) * W + wi];
            row[w * C + c] =
                static_cast<uint8_t>(sgn ? static_cast<int>(v) + 128 : static_cast<int>(v));
          }
        }
      }
    });
    Conv2dParams cp;
    cp.stride_h = cp.stride_w = s.stride;
    return int8_conv2d_s32(src, rt.w8_oihw, cp);  // [N, OH, OW, O]
  }

  // A fused int-path conv as one direct kernel from the codes to sign bits
  // (int8_conv_sign_bits): the codes go to a padded planar u8 image (s8 codes shifted by +128,
  // the thresholds moved with them); nothing where the kernel does not run here.
  // With `codes` (the model's input step, fused too), x holds the raw inputs and their codes are
  // made here, as lowbit_act_codes makes them.
  std::optional<fused::BitMap> conv_sign_direct(const Tensor& x,
                                                const ActCodeParams* codes = nullptr) const {
    const int64_t C = s.in, KS = s.kernel, P = s.padding;
    if (x.dim() != 4 || x.size(1) != C || default_reduce_range()) return std::nullopt;
    const int64_t N = x.size(0), H = x.size(2), W = x.size(3);
    const int64_t OH = conv_out(H, KS, s.stride, P), OW = conv_out(W, KS, s.stride, P);
    if (OH <= 0 || OW <= 0) return std::nullopt;  // conv_acc says why
    const int64_t HP = H + 2 * P, WPS = W + 2 * P + 3;
    const bool sgn = src_signed();
    const uint8_t fill = sgn ? 128 : 0;
    const float inv = codes ? 1.0f / codes->scale : 1.0f;
    const float qmin = codes ? static_cast<float>(codes->qmin()) : 0.0f;
    const float qmax = codes ? static_cast<float>(codes->qmax()) : 0.0f;
    if (codes &&
        (codes->kind == ActCodeKind::sign || sgn != (codes->kind == ActCodeKind::signed8))) {
      return std::nullopt;
    }
    Tensor img = empty(Shape{N * C * HP * WPS}, {.dtype = DType::uint8});
    uint8_t* ip = img.data<uint8_t>();
    const float* xp = x.data<float>();
    host_parallel_for(N * C, N * C * HP * WPS, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        uint8_t* plane = ip + nc * HP * WPS;
        std::memset(plane, fill, static_cast<size_t>(HP * WPS));
        for (int64_t h = 0; h < H; ++h) {
          const float* src = xp + (nc * H + h) * W;
          uint8_t* row = plane + (h + P) * WPS + P;
          if (codes) {  // as lowbit_act_codes: nearbyint is round_even
            act_codes_u8(row, src, W, inv, qmin, qmax, sgn ? 128 : 0);
            continue;
          }
          for (int64_t w = 0; w < W; ++w) {
            row[w] = static_cast<uint8_t>(sgn ? static_cast<int>(src[w]) + 128
                                              : static_cast<int>(src[w]));
          }
        }
      }
    });
    fused::BitMap b;
    b.N = N;
    b.H = OH;
    b.W = OW;
    b.C = s.out;
    b.CW = (s.out + 63) / 64;
    b.words = empty(Shape{N * OH * OW * b.CW}, {.dtype = DType::int64});
    if (!int8_conv_sign_bits(reinterpret_cast<uint64_t*>(b.words.data_ptr()), ip, rt.w8.data(), N,
                             C, HP, WPS, KS, s.stride, OH, OW, s.out,
                             (sgn ? rt.thr_shifted : rt.thr).data(), rt.flip.data())) {
      return std::nullopt;
    }
    return b;
  }

  // acc [N, OH, OW, O] s32 of a conv from fp32 codes (x) or sign bits (b, binary-act). Binary
  // sums have their padding corrected; *shifted: conv_onednn_acc's s8 shift is still in them.
  // With `sign_out` (a fused binary-act conv): the sums' sign bits go there instead (the
  // padding corrections move into the thresholds) and the returned tensor is empty.
  Tensor conv_acc(const Tensor* x, const fused::BitMap* b, int64_t* OHp, int64_t* OWp,
                  bool* shifted, fused::BitMap* sign_out = nullptr) const {
    const int64_t C = s.in, KS = s.kernel, K = C * KS * KS;
    int64_t N, H, W;
    if (b) {
      if (!binary() || b->flat || b->C != C) {
        throw std::invalid_argument(fmt::format(
            "mixp::quant::PackedModel: layer '{}' cannot take a {}-channel sign map", s.name,
            b->C));
      }
      N = b->N, H = b->H, W = b->W;
    } else {
      if (x->dim() != 4 || x->size(1) != C) {
        throw std::invalid_argument(fmt::format(
            "mixp::quant::PackedModel: layer '{}' expects [N, {}, H, W] codes, got {}", s.name, C,
            x->shape().str()));
      }
      N = x->size(0), H = x->size(2), W = x->size(3);
    }
    const int64_t OH = conv_out(H, KS, s.stride, s.padding),
                  OW = conv_out(W, KS, s.stride, s.padding);
    if (OH <= 0 || OW <= 0) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::PackedModel: layer '{}': input [{}, {}, {}, {}] is smaller than the kernel",
          s.name, N, C, H, W));
    }
    *OHp = OH;
    *OWp = OW;
    *shifted = false;
    if (!binary() && !default_reduce_range()) {
      *shifted = src_signed();
      return conv_onednn_acc(*x);
    }
    const int64_t M = N * OH * OW;
    auto origin = [&](int64_t m, int64_t* n, int64_t* h0, int64_t* w0) {
      *n = m / (OH * OW);
      const int64_t p = m % (OH * OW);
      *h0 = (p / OW) * s.stride - s.padding;
      *w0 = (p % OW) * s.stride - s.padding;
    };
    // binary-act: the sign bits of every input position, C bits in CW words ([N, H, W, CW]).
    const int64_t CW = (C + 63) / 64;
    Tensor own;
    const uint64_t* signs = b ? b->data() : nullptr;
    if (binary() && !b) {
      own = zeros(Shape{N * H * W * CW}, {.dtype = DType::int64});
      auto* sg = reinterpret_cast<uint64_t*>(own.data_ptr());
      const float* xp = x->data<float>();
      host_parallel_for(N * H, N * C * H * W, [&](int64_t lo, int64_t hi) {
        for (int64_t nh = lo; nh < hi; ++nh) {
          const int64_t n = nh / H, h = nh % H;
          for (int64_t c = 0; c < C; ++c) {
            const float* src = xp + ((n * C + c) * H + h) * W;
            uint64_t* dst = sg + nh * W * CW + c / 64;
            const uint64_t bit = uint64_t{1} << (c % 64);
            for (int64_t w = 0; w < W; ++w) {
              if (src[w] < 0.0f) dst[w * CW] |= bit;
            }
          }
        }
      });
      signs = sg;
    }
    const float* xp = b ? nullptr : x->data<float>();
    auto fill = [&](int64_t m, uint64_t* bits, uint8_t* bytes) {
      int64_t n, h0, w0;
      origin(m, &n, &h0, &w0);
      if (bits) {
        // Bits (kh, kw, ci): the C sign bits of each window position appended in turn; padding
        // stays 0 (+1, corrected below).
        for (int64_t w = 0; w < rt.words; ++w) bits[w] = 0;
        if (CW == 1 && 64 % C == 0) {
          // One word per position and no position straddling two words (C = 32, 64, ...): the
          // common case, without the general loop's bookkeeping.
          for (int64_t kh = 0; kh < KS; ++kh) {
            const int64_t h = h0 + kh;
            if (h < 0 || h >= H) continue;
            const uint64_t* src = signs + (n * H + h) * W;
            int64_t at = kh * KS * C;
            for (int64_t kw = 0; kw < KS; ++kw, at += C) {
              const int64_t w = w0 + kw;
              if (w >= 0 && w < W) bits[at >> 6] |= src[w] << (at & 63);
            }
          }
          return;
        }
        int64_t off = 0;
        for (int64_t kh = 0; kh < KS; ++kh) {
          for (int64_t kw = 0; kw < KS; ++kw, off += C) {
            const int64_t h = h0 + kh, w = w0 + kw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const uint64_t* src = signs + ((n * H + h) * W + w) * CW;
            for (int64_t j = 0; j < CW; ++j) {
              const uint64_t v = src[j];  // bits past C are zero
              const int64_t at = off + 64 * j, sh = at % 64;
              bits[at / 64] |= v << sh;
              if (sh != 0 && at / 64 + 1 < rt.words) bits[at / 64 + 1] |= v >> (64 - sh);
            }
          }
        }
        return;
      }
      // im2col of one output position, k = (ci * KS + kh) * KS + kw; padding reads as 0.
      const float* img = xp + n * C * H * W;
      const bool sgn = src_signed();
      int64_t k = 0;
      for (int64_t ci = 0; ci < C; ++ci) {
        for (int64_t kh = 0; kh < KS; ++kh) {
          const int64_t h = h0 + kh;
          const bool hin = h >= 0 && h < H;
          const float* rowp = img + (ci * H + (hin ? h : 0)) * W;
          for (int64_t kw = 0; kw < KS; ++kw, ++k) {
            const int64_t w = w0 + kw;
            const float v = hin && w >= 0 && w < W ? rowp[w] : 0.0f;
            bytes[k] = sgn ? static_cast<uint8_t>(static_cast<int8_t>(v)) : static_cast<uint8_t>(v);
          }
        }
      }
    };
    // The padding correction of each output position's border pattern (null inside).
    std::vector<const int32_t*> corr;
    if (binary()) {
      corr.assign(static_cast<size_t>(OH * OW), nullptr);
      for (int64_t p = 0; p < OH * OW; ++p) {
        int64_t n, h0, w0;
        origin(p, &n, &h0, &w0);
        const std::array<int64_t, 4> pat{std::max<int64_t>(0, -h0),
                                         std::max<int64_t>(0, h0 + KS - H),
                                         std::max<int64_t>(0, -w0),
                                         std::max<int64_t>(0, w0 + KS - W)};
        if (pat != std::array<int64_t, 4>{0, 0, 0, 0}) {
          corr[static_cast<size_t>(p)] = correction(pat).data();
        }
      }
    }
    if (sign_out) {
      // sum - corr < t  <=>  sum < t + corr: one threshold row per border pattern.
      std::vector<const int32_t*> pos_thr(static_cast<size_t>(OH * OW));
      for (int64_t p = 0; p < OH * OW; ++p) {
        const int32_t* c = corr[static_cast<size_t>(p)];
        pos_thr[static_cast<size_t>(p)] = c ? fused::corrected_thresholds(rt, c) : rt.thr.data();
      }
      *sign_out = fused::BitMap{};
      sign_out->N = N;
      sign_out->H = OH;
      sign_out->W = OW;
      sign_out->C = s.out;
      sign_out->CW = (s.out + 63) / 64;
      sign_out->words = empty(Shape{M * sign_out->CW}, {.dtype = DType::int64});
      auto* sw = reinterpret_cast<uint64_t*>(sign_out->words.data_ptr());
      // From the sign map straight to sign bits where the direct kernel runs (no bit rows).
      if (b && rt.xconv && xnor_conv_sign_bits(sw, b->data(), *rt.xconv, N, H, W, s.stride,
                                                 s.padding, OH, OW, pos_thr.data(),
                                                 rt.flip.data())) {
        return Tensor();
      }
      std::vector<const int32_t*> rows(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m)
        rows[static_cast<size_t>(m)] = pos_thr[static_cast<size_t>(m % (OH * OW))];
      gemm(M, K, fill, sw, rows.data());
      return Tensor();
    }
    Tensor acc = gemm(M, K, fill);
    if (binary()) {
      bool any = false;
      for (const int32_t* c : corr) any = any || c != nullptr;
      if (any) {
        const int64_t O = s.out;
        int32_t* ap = acc.data<int32_t>();
        host_parallel_for(M, M * O, [&](int64_t lo, int64_t hi) {
          for (int64_t m = lo; m < hi; ++m) {
            const int32_t* c = corr[static_cast<size_t>(m % (OH * OW))];
            if (c == nullptr) continue;
            int32_t* row = ap + m * O;
            for (int64_t o = 0; o < O; ++o) row[o] -= c[o];
          }
        });
      }
    }
    return acc;
  }
};

// acc [N, P, O] s32 (P = OH * OW positions) -> the layer's fp32 output, NCHW [N, O, OH, OW]
// (conv) or [N, O]: lowbit_rescale of the sums less the per-channel offset `off` (may be null),
// in one pass (rescale_s32: the same fp32 multiply and add, so the same bits).
Tensor rescaled(const Tensor& acc, int64_t N, int64_t O, int64_t OH, int64_t OW, bool conv,
                const int32_t* off, const std::vector<float>& mult, const Tensor& bias) {
  Tensor out = empty(conv ? Shape{N, O, OH, OW} : Shape{N, O}, {.dtype = DType::fp32});
  const Tensor b = bias.defined() ? detail::as_fp32_contiguous(bias) : Tensor();
  rescale_s32(out.data<float>(), acc.data<int32_t>(), N, OH * OW, O, off, mult.data(),
              b.defined() ? b.data<float>() : nullptr);
  return out;
}

// lowbit_act_codes without the autograd bookkeeping, on the backend's act_codes_f32 (the same
// codes bit for bit); sign codes and parameters it would refuse go to lowbit_act_codes itself.
Tensor act_codes(const Tensor& y, const ActCodeParams& p) {
  const bool plain = p.kind != ActCodeKind::sign && p.scale > 0.0f && std::isfinite(p.scale) &&
                     (p.kind != ActCodeKind::unsigned_bits || (p.bits >= 1 && p.bits <= 8)) &&
                     y.dtype() == DType::fp32;
  if (!plain) return lowbit_act_codes(y, p);
  const Tensor x = y.contiguous();
  Tensor out = empty(x.shape(), {.dtype = DType::fp32});
  act_codes_f32(out.data<float>(), x.data<float>(), x.numel(), 1.0f / p.scale,
                static_cast<float>(p.qmin()), static_cast<float>(p.qmax()));
  return out;
}

}  // namespace

Tensor PackedModel::forward(const Tensor& x0) {
  if (!x0.defined() || !x0.is_floating_point() || (x0.dim() != 2 && x0.dim() != 4)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::PackedModel: input must be floating [N, C, H, W] or [N, K], got {}",
        x0.defined() ? std::string(name(x0.dtype())) + " " + x0.shape().str() : "nothing"));
  }
  NoGradGuard ng;
  // A cpu inference model, as int8_model.cpp's: it computes on the host (inputs on another
  // device come over as a host copy, docs/architecture.md 3.5) and hands its result back on the
  // input's device.
  const DefaultDeviceGuard host(Device::cpu());
  const Tensor x = detail::as_fp32_contiguous(x0.to(Device::cpu()));
  const int64_t N = x.size(0);
  // Slices of the batch where a convolution's output goes through fp32 passes (the unfused
  // epilogues): for 128 cnn images conv1's is 12.8 MB and went to memory and back between every
  // two steps; for 16 it stays in L2 (binary weights-only cnn: 0.23x -> 0.43x the int8 model).
  // Sign bits are 32 times smaller: the fused binary-act path runs whole batches (slicing it
  // measured 5-10% slower).
  bool fp32_maps = false;
  for (size_t i = 0; i < steps_.size(); ++i) {
    fp32_maps = fp32_maps || (steps_[i].kind == "layer" && steps_[i].conv && !rt_[i]->fuse_sign);
  }
  const int64_t slice = kSlice;
  if (N <= slice || !fp32_maps) return forward_slice(x).to(x0.device());
  Tensor out;
  int64_t row = 0;
  for (int64_t b0 = 0; b0 < N; b0 += slice) {
    const int64_t b1 = std::min(N, b0 + slice);
    const Tensor part = forward_slice(x.slice(0, b0, b1).contiguous()).contiguous();
    if (!out.defined()) {
      std::vector<int64_t> dims(part.shape().begin(), part.shape().end());
      dims[0] = N;
      out = empty(Shape(dims), {.dtype = part.dtype()});
      row = static_cast<int64_t>(part.nbytes()) / (b1 - b0);
    }
    std::memcpy(static_cast<char*>(out.data_ptr()) + b0 * row, part.data_ptr(), part.nbytes());
  }
  return out.to(x0.device());
}

Tensor PackedModel::forward_slice(Tensor y) {
  // Between a fused layer and the binary-act layer it feeds, the activations are sign bits.
  std::optional<fused::BitMap> bits;
  size_t last_step = 0;
  if (step_times_) step_times_->resize(steps_.size(), 0.0);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (step_times_ && i > 0) {
      // The previous step's time (a fused layer jumped past the steps it replaced).
      const auto t1 = std::chrono::steady_clock::now();
      (*step_times_)[last_step] += std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
    }
    last_step = i;
    const PackedStep& s = steps_[i];
    Runtime& rt = *rt_[i];
    if (s.kind == "input") {
      if (i + 1 < steps_.size() && steps_[i + 1].kind == "layer" && steps_[i + 1].conv &&
          rt_[i + 1]->fuse_sign && steps_[i + 1].scheme != LowBitScheme::binary_act &&
          std::isfinite(s.act.scale) && s.act.scale > 0.0f) {
        // The input codes go straight into the first conv's image, its sums to sign bits.
        const LayerRun run{steps_[i + 1], *rt_[i + 1]};
        const Tensor x = y.contiguous();
        std::optional<fused::BitMap> out = run.conv_sign_direct(x, &s.act);
        if (out) {
          bits = std::move(out);
          last_step = i + 1;  // timed as the layer's
          i = rt_[i + 1]->next - 1;
          continue;
        }
      }
      y = act_codes(y, s.act);
    } else if (s.kind == "layer") {
      const LayerRun run{s, rt};
      const Tensor x = bits ? Tensor() : y.contiguous();
      int64_t N = 0, OH = 1, OW = 1;
      bool shifted = false;
      Tensor acc;
      if (s.conv && rt.fuse_sign && s.scheme != LowBitScheme::binary_act && !bits) {
        std::optional<fused::BitMap> out = run.conv_sign_direct(x);
        if (out) {
          bits = std::move(out);
          i = rt.next - 1;  // int8 sums to sign bits in one kernel
          continue;
        }
      }
      if (s.conv && rt.fuse_sign && s.scheme == LowBitScheme::binary_act) {
        fused::BitMap out;
        run.conv_acc(bits ? nullptr : &x, bits ? &*bits : nullptr, &OH, &OW, &shifted, &out);
        bits = std::move(out);
        i = rt.next - 1;  // XNOR sums to sign bits in one kernel
        continue;
      }
      if (s.conv) {
        acc = run.conv_acc(bits ? nullptr : &x, bits ? &*bits : nullptr, &OH, &OW, &shifted);
        N = acc.numel() / (OH * OW * s.out);  // [N, OH, OW, O] or [N * OH * OW, O]
      } else {
        acc = bits ? run.linear_acc(*bits) : run.linear_acc(x);
        N = acc.size(0);
      }
      if (rt.fuse_sign) {
        bits = fused::sign_bits(acc, N, OH, OW, rt, shifted);
        i = rt.next - 1;  // past the batch norm and the sign the thresholds hold
        continue;
      }
      bits.reset();
      std::vector<int32_t> off;
      if (shifted) {
        off.resize(rt.wsum.size());
        for (size_t o = 0; o < off.size(); ++o) off[o] = 128 * rt.wsum[o];
      }
      y = rescaled(acc, N, s.out, OH, OW, s.conv, shifted ? off.data() : nullptr, rt.mult, s.bias);
    } else if (bits) {
      if (s.kind == "max_pool2d") {
        bits = fused::max_pool(*bits, s);
      } else if (s.kind == "flatten") {
        bits->flat = true;
      } else {
        throw std::logic_error("mixp::quant::PackedModel: step '" + s.name +
                               "' after a fused sign epilogue");
      }
    } else if (s.kind == "batch_norm") {
      y = batch_norm(y, s.running_mean, s.running_var, s.gamma, s.beta, false, s.momentum, s.eps);
    } else if (s.kind == "act") {
      y = act_codes(s.relu ? relu(y) : y, s.act);
    } else if (s.kind == "max_pool2d") {
      y = max_pool2d(y, s.pool_kernel, s.pool_stride, s.pool_padding);
    } else if (s.kind == "flatten") {
      y = y.flatten(1, -1);
    } else {
      throw std::invalid_argument("mixp::quant::PackedModel: unknown step kind '" + s.kind + "'");
    }
  }
  if (step_times_ && !steps_.empty()) {
    (*step_times_)[last_step] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return y;
}

}  // namespace mixp::quant
