// block_scaled_linear: fp8_linear for the block-scaled recipes fp8_block, nvfp4 and mxfp4
// (fp8_scaling.h; docs/fp4.md and docs/fp8.md "fp8-block" are the user's guide). Emulated by
// fake quantization: each GEMM operand is quantized with mixp/format/block_scaled.h along that
// GEMM's reduction dimension, dequantized to fp32, and the GEMM runs in fp32 (oneDNN f32), so the
// products are exact and only the accumulation order differs from a tensor core's.
//
// Which quantization each operand gets (TE's Float8BlockScaling / NVFP4BlockScaling roles):
//   fprop  y  = x w^T      x rows (1xB along K), RNE; w with the weight tile along K
//   dgrad  dx = g w        g rows (1xB along N), SR for fp4 when sr; w along N: the forward's
//                          values when the weight tile is square (16x16, 128x128: W and W^T alike),
//                          else w quantized column-wise (1xB along N)
//   wgrad  dw = g^T x      g and x column-wise (1xB along M); for fp4 with rht both get the
//                          16-point RHT along M first (M zero-padded to a multiple of 16; the
//                          transform is orthogonal, so dw is unchanged up to quantization), and g
//                          is rounded stochastically when sr.
//   B = 16 (nvfp4), 32 (mxfp4), 128 (fp8_block). The bias gradient is the row sum of the
//   unquantized gradient, as in fp8_linear.
// Stochastic rounding draws its bits from a seed hashed from the tensor's own values and its
// role, so a run is reproducible, resumes bit for bit and two roles never share bits.
#include <algorithm>
#include <bit>
#include <cstring>

#include "amp/fp8_detail.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "mixp/format/block_scaled.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"

namespace mixp::amp::detail {

namespace {

BlockScheme scheme_of(Fp8Scaling s) {
  return s == Fp8Scaling::fp8_block ? BlockScheme::fp8_block
         : s == Fp8Scaling::nvfp4   ? BlockScheme::nvfp4
                                    : BlockScheme::mxfp4;
}

uint64_t value_seed(const float* p, size_t n, uint64_t role) {
  uint64_t h = 0xcbf29ce484222325ULL ^ (role * 0x9E3779B97F4A7C15ULL);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, 4);
    h = (h ^ u) * 0x100000001b3ULL;
  }
  return h;
}

// Host fp32 copy of a 2-D tensor, [R, C] contiguous.
Tensor host_f32(const Tensor& t) {
  Tensor h = mixp::detail::raw_contiguous(mixp::detail::as_compute(t.detach(), DType::fp32));
  return h.device().kind == DeviceKind::cpu ? h.clone() : h.to(Device::cpu());
}

// Fake-quantizes a host [R, C] fp32 tensor in place, blocks along C.
void fq(Tensor& t, const BlockScaledOptions& o, uint64_t role) {
  float* p = t.data<float>();
  const size_t n = static_cast<size_t>(t.numel());
  BlockScaledOptions op = o;
  if (op.round == Round::stochastic) op.seed = value_seed(p, n, role);
  block_scaled_fake_quantize(std::span<float>(p, n), t.size(0), t.size(1), op);
  t.bump_version();
}

// t [R, C] -> its transpose [C, Rp] quantized with blocks along R (Rp = R, or R rounded up to a
// multiple of 16 with zero rows when the RHT is applied first).
Tensor columns(const Tensor& t, const BlockScaledOptions& o, bool rht, uint64_t role) {
  const int64_t R = t.size(0), C = t.size(1);
  const int64_t Rp = rht ? (R + 15) / 16 * 16 : R;
  Tensor out = zeros(Shape{C, Rp}, {.device = Device::cpu()});
  const float* s = t.data<float>();
  float* d = out.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) d[c * Rp + r] = s[r * C + c];
  if (rht && C * Rp > 0) rht16_rows(std::span<float>(d, static_cast<size_t>(C * Rp)), C, Rp);
  out.bump_version();
  fq(out, o, role);
  return out;
}


// DeepSeek-V3 3.3.2: Hopper's FP8 tensor cores keep about 14 bits of the accumulator. Emulated
// as an fp32 accumulator whose sum is truncated to 14 significant bits after every addition,
// added into an fp32 total (and reset) every `promote` products. a [M, K] @ bt [N, K]^T.
Tensor gemm_promoted(const Tensor& a_in, const Tensor& bt_in, int promote) {
  const Tensor a = a_in.contiguous(), bt = bt_in.contiguous();
  const int64_t M = a.size(0), K = a.size(1), N = bt.size(0);
  Tensor y = Tensor::empty(Shape{M, N}, {.device = Device::cpu()});
  const float *pa = a.data<float>(), *pb = bt.data<float>();
  float* py = y.data<float>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float total = 0.0f, acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        acc = std::bit_cast<float>(std::bit_cast<uint32_t>(acc + pa[i * K + k] * pb[j * K + k]) &
                                   ~uint32_t{0x3FF});
        if ((k + 1) % promote == 0 || k + 1 == K) {
          total += acc;
          acc = 0.0f;
        }
      }
      py[i * N + j] = total;
    }
  y.bump_version();
  return y;
}

struct Plan {
  BlockScaledOptions act, weight, grad;  // rows of x, w, g
  bool rht = false, square_weight = false;
  int promote = 0;  // fp8_block: emulate the limited accumulator (gemm_promoted)
};

Plan plan_of(const Fp8Recipe& r) {
  Plan p;
  const BlockScheme s = scheme_of(r.scaling);
  p.act = {.scheme = s, .tile_rows = 1, .pow2_scales = r.pow2};
  p.weight = p.act;
  p.grad = p.act;
  if (s == BlockScheme::fp8_block) p.weight.tile_rows = 128;
  if (s == BlockScheme::nvfp4 && r.weight_2d) p.weight.tile_rows = 16;
  if (s != BlockScheme::fp8_block) {
    p.rht = r.rht;
    if (r.sr) p.grad.round = Round::stochastic;
  }
  p.square_weight = p.weight.tile_rows > 1;
  p.promote = s == BlockScheme::fp8_block ? r.promote : 0;
  return p;
}

Tensor gemm_abt(const Tensor& a, const Tensor& bt, int promote) {
  if (promote > 0) return gemm_promoted(a, bt, promote);
  Tensor dst = Tensor::empty(Shape{a.size(0), bt.size(0)}, {.device = Device::cpu()});
  gemm(dst, a, bt.t());
  return dst;
}

enum : uint64_t { kRoleX = 1, kRoleW, kRoleWc, kRoleG, kRoleGc, kRoleXc };

}  // namespace

Tensor block_scaled_linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                           Fp8LinearMeta& meta) {
  const bool rec = mixp::detail::should_record({&x, &w, &b});
  const bool need_dx = rec && x.requires_grad();
  const bool need_dw = rec && w.requires_grad();
  const bool relu = act == Activation::relu;
  const int64_t K = w.size(1), N = w.size(0);
  const Plan plan = plan_of(meta.recipe());
  const Device dev = x.device();

  Tensor x2 = host_f32(mixp::detail::raw_reshape(mixp::detail::raw_contiguous(x),
                                                 Shape{K ? x.numel() / K : 0, K}));
  Tensor wf = host_f32(w);
  const int64_t M = x2.size(0);
  Tensor y, keep_xc, keep_w;
  {
    NoGradGuard ng;
    Tensor xq = x2.clone();
    fq(xq, plan.act, kRoleX);
    if (need_dw) keep_xc = columns(x2, plan.act, plan.rht, kRoleXc);  // [K, Mp]
    Tensor wq = wf.clone();
    fq(wq, plan.weight, kRoleW);
    if (need_dx) keep_w = plan.square_weight ? wq : columns(wf, plan.weight, false, kRoleWc).t();
    y = gemm_abt(xq, wq, plan.promote);
    if (dev.kind != DeviceKind::cpu) y = y.to(dev);
    Tensor bf = b.defined() ? mixp::detail::raw_contiguous(
                                  mixp::detail::as_compute(b.detach(), DType::fp32))
                            : Tensor();
    backend_for(y, bf).scale_bias_act(y, y, bf, 1.0f, relu ? Activation::relu : Activation::none);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  Tensor out = mixp::detail::raw_reshape(y, out_shape);
  if (!rec) return out;

  Tensor keep_y = relu ? y.detach() : Tensor();
  const Shape x_shape = x.shape();
  mixp::detail::record(
      OpId::linear, DType::fp32, {&x, &w, &b}, {&out},
      [keep_xc, keep_w, keep_y, plan, x_shape, M, N, dev](BackwardContext& ctx) {
        Tensor g = linear_output_grad(ctx.grad(), keep_y, M, N);
        if (ctx.needs(2)) ctx.grad_inputs[2] = sum(g, Shape{0}, false);
        if (!ctx.needs(0) && !ctx.needs(1)) return;
        const Tensor gh = host_f32(g);
        if (ctx.needs(0)) {  // dx [M, K] = g [M, N] @ w [N, K], blocks along N
          Tensor gq = gh.clone();
          fq(gq, plan.grad, kRoleG);
          Tensor dx = gemm_abt(gq, keep_w.t(), plan.promote);
          if (dev.kind != DeviceKind::cpu) dx = dx.to(dev);
          ctx.grad_inputs[0] = mixp::detail::raw_reshape(dx, x_shape);
        }
        if (ctx.needs(1)) {  // dw [N, K] = g^T [N, M] @ x [M, K], blocks along M
          const Tensor gc = columns(gh, plan.grad, plan.rht, kRoleGc);  // [N, Mp]
          Tensor dw = gemm_abt(gc, keep_xc, plan.promote);
          if (dev.kind != DeviceKind::cpu) dw = dw.to(dev);
          ctx.grad_inputs[1] = dw;
        }
      });
  return out;
}

}  // namespace mixp::amp::detail
