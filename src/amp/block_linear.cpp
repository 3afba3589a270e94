// block_scaled_linear: fp8_linear for the block-scaled recipes fp8_block, nvfp4 and mxfp4
// (fp8_scaling.h; docs/fp4.md and docs/fp8.md "fp8-block" are the user's guide). Emulated by
// fake quantization: each GEMM operand is quantized with mixp/format/block_scaled.h along that
// GEMM's reduction dimension, and the GEMM runs on the quantized values with exact products and
// fp32 accumulation, as a block-scaled tensor core does:
//   nvfp4, mxfp4  the values e2m1 x block scale are exact in bf16 (block_scaled.h,
//                 BlockScaledFactors: at most 6 significant bits of bf16's 8, fp32's exponent
//                 range), so one oneDNN bf16 GEMM (exact products, fp32 accumulation) forms the
//                 products, and the fp32 per-tensor scales (nvfp4's amax / 2688 of each operand)
//                 multiply the fp32 result, as TE passes them to cuBLASLt as alpha.
//   fp8_block     the scales vary along K (per 1x128 / 128x128 tile): one bf16 GEMM per 128-wide
//                 K chunk on the E4M3 values (exact in bf16), each partial sum multiplied by its
//                 two tiles' scales and added in fp32: DeepSeek-V3's promotion every 128
//                 (section 3.3.2) with an fp32 partial accumulator. Where mixp's bf16 kernel
//                 runs those chunks, one call does it all (gemm_chunk_scaled, mixp/backend/
//                 gemm.h: the same bits) and the wgrad operands are quantized column-wise
//                 without a transpose (fp8_columns). `promote` > 0 (the emulated
//                 limited accumulator) keeps the fp32 path: dequantized fp32 operands and
//                 gemm_promoted.
// Compared with multiplying dequantized fp32 copies, the products are the same numbers; only the
// order of the sums (and, for nvfp4, where the per-tensor factor is applied) differs.
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
// role (value_seed: per-block hashes, computed in parallel, combined in order), so a run is
// reproducible, resumes bit for bit and two roles never share bits.
#include <algorithm>
#include <bit>
#include <cstring>
#include <span>
#include <vector>

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

// FNV-1a over 32-bit words, 16 interleaved lanes per block of 4096 values (a loop the compiler
// vectorises), the blocks hashed in parallel and combined in order with the length and role: a
// pure function of the values, their order and the role, as the serial hash it replaces.
uint64_t value_seed(const float* p, size_t n, uint64_t role) {
  constexpr size_t kBlock = 4096;
  const size_t nb = (n + kBlock - 1) / kBlock;
  std::vector<uint64_t> hb(nb);
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16))
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    uint32_t lane[16];
    for (uint32_t l = 0; l < 16; ++l) lane[l] = 0x811C9DC5u + l;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16)
      for (int l = 0; l < 16; ++l) {
        uint32_t u;
        std::memcpy(&u, p + i + l, 4);
        lane[l] = (lane[l] ^ u) * 0x01000193u;
      }
    for (int l = 0; i < hi; ++i, ++l) {
      uint32_t u;
      std::memcpy(&u, p + i, 4);
      lane[l] = (lane[l] ^ u) * 0x01000193u;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint32_t l : lane) h = (h ^ l) * 0x100000001b3ULL;
    hb[b] = h;
  }
  uint64_t h = (0xcbf29ce484222325ULL ^ (role * 0x9E3779B97F4A7C15ULL)) + n;
  for (uint64_t v : hb) h = ((h ^ v) * 0x100000001b3ULL) ^ (h >> 29);
  return h;
}

enum : uint64_t { kRoleX = 1, kRoleW, kRoleWc, kRoleG, kRoleGc, kRoleXc };

// The operands' names for the block-operand observer (fp8_linear.h).
std::string_view role_name(uint64_t role) {
  switch (role) {
    case kRoleX: return "input";
    case kRoleW: return "weight";
    case kRoleWc: return "weight.columns";
    case kRoleG: return "grad_output";
    case kRoleGc: return "grad_output.columns";
    default: return "input.columns";
  }
}

BlockOperandObserver& block_observer() {
  static BlockOperandObserver o;
  return o;
}

void observe(const Fp8LinearMeta* meta, uint64_t role, const Tensor& t,
             const BlockScaledOptions& o) {
  if (const BlockOperandObserver& f = block_observer(); f && meta) f(*meta, role_name(role), t, o);
}

// Host fp32 view or copy of a 2-D tensor, [R, C] contiguous (read only).
Tensor host_f32(const Tensor& t) {
  Tensor h = mixp::detail::raw_contiguous(mixp::detail::as_compute(t.detach(), DType::fp32));
  return h.device().kind == DeviceKind::cpu ? h : h.to(Device::cpu());  // only read: no copy
}

Tensor host_empty(int64_t r, int64_t c, DType d) {
  return Tensor::empty(Shape{r, c}, {.dtype = d, .device = Device::cpu()});
}

// A GEMM operand [R, C], quantized along C: v holds the values before the factor (bf16, exact),
// or the dequantized fp32 values when the limited accumulator is emulated (promote > 0).
struct Operand {
  Tensor v;
  float scale = 1.0f;        // nvfp4: amax / 2688; else 1
  std::vector<float> tiles;  // fp8_block: scale per tile (tile_rows x 128), tiles row-major
  int tile_rows = 1;
  int64_t grid_cols = 0;
  bool view = false;  // v is a transposed view (fp8_columns): contiguous for the chunk loop
  float tile(int64_t r, int64_t chunk) const {
    return tiles[static_cast<size_t>((r / tile_rows) * grid_cols + chunk)];
  }
};

// Quantizes a host fp32 [R, C] tensor along C (handing it to the observer first, with meta).
Operand quantize(const Tensor& t, const BlockScaledOptions& o, uint64_t role, bool fp32_values,
                 const Fp8LinearMeta* meta) {
  const float* p = t.data<float>();
  const int64_t R = t.size(0), C = t.size(1);
  const size_t n = static_cast<size_t>(R * C);
  BlockScaledOptions op = o;
  if (op.round == Round::stochastic) op.seed = value_seed(p, n, role);
  observe(meta, role, t, op);
  Operand r;
  r.tile_rows = o.tile_rows;
  if (fp32_values) {
    r.v = t.clone();
    block_scaled_fake_quantize(std::span<float>(r.v.data<float>(), n), R, C, op);
    r.v.bump_version();
    return r;
  }
  r.v = host_empty(R, C, DType::bf16);  // the values are exact in bf16 (block_scaled.h)
  BlockScaledFactors fac = block_scaled_fake_quantize_factors(
      std::span<const float>(p, n), R, C, op,
      std::span<uint16_t>(static_cast<uint16_t*>(r.v.data_ptr()), n));
  r.scale = fac.tensor_scale;
  r.tiles = std::move(fac.tile_scales);
  r.grid_cols = (C + 127) / 128;
  r.v.bump_version();
  return r;
}

// The operand of W^T when W's tiles are square (W and W^T quantize alike): a transposed view
// and the transposed tile grid.
Operand transposed(const Operand& w) {
  Operand t = w;
  t.v = w.v.t();
  if (!w.tiles.empty()) {
    const int64_t gr = static_cast<int64_t>(w.tiles.size()) / w.grid_cols, gc = w.grid_cols;
    for (int64_t i = 0; i < gr; ++i)
      for (int64_t j = 0; j < gc; ++j) t.tiles[static_cast<size_t>(j * gr + i)] = w.tiles[static_cast<size_t>(i * gc + j)];
    t.grid_cols = gr;
  }
  return t;
}

// t [R, C] -> its transpose [C, Rp] quantized with blocks along R (Rp = R, or R rounded up to a
// multiple of 16 with zero rows when the RHT is applied first).
Operand columns(const Tensor& t, const BlockScaledOptions& o, bool rht, uint64_t role,
                bool fp32_values, const Fp8LinearMeta* meta) {
  const int64_t R = t.size(0), C = t.size(1);
  const int64_t Rp = rht ? (R + 15) / 16 * 16 : R;
  Tensor out = host_empty(C, Rp, DType::fp32);
  block_scaled_columns(std::span<const float>(t.data<float>(), static_cast<size_t>(R * C)), R, C,
                       rht, std::span<float>(out.data<float>(), static_cast<size_t>(C * Rp)));
  out.bump_version();
  return quantize(out, o, role, fp32_values, meta);
}

// fp8_block's column-wise operand of t [R, C] without the fp32 transpose of columns(): t
// quantized in 128 x 1 tiles in its own layout (fp8_block_columns_factors: the same values and
// scales), v its transposed view [C, R] and the tile grid transposed to [C, R / 128]. Used where
// gemm_chunk_scaled takes the wgrad GEMM, which reads the view as it is.
Operand fp8_columns(const Tensor& t, const BlockScaledOptions& o, uint64_t role,
                    const Fp8LinearMeta* meta) {
  observe(meta, role, t.t(), o);  // the operand as columns() hands it over (a view here)
  const int64_t R = t.size(0), C = t.size(1);
  const size_t n = static_cast<size_t>(R * C);
  Tensor q = host_empty(R, C, DType::bf16);
  const BlockScaledFactors fac = fp8_block_columns_factors(
      std::span<const float>(t.data<float>(), n), R, C, o,
      std::span<uint16_t>(static_cast<uint16_t*>(q.data_ptr()), n));
  q.bump_version();
  Operand r;
  r.v = q.t();
  r.view = true;
  const int64_t gr = (R + 127) / 128;
  r.grid_cols = gr;
  r.tiles.resize(fac.tile_scales.size());
  for (int64_t i = 0; i < gr; ++i)
    for (int64_t c = 0; c < C; ++c)
      r.tiles[static_cast<size_t>(c * gr + i)] = fac.tile_scales[static_cast<size_t>(i * C + c)];
  return r;
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
  // Whether the wgrad GEMM dw [n, k] = g^T x (reduction over the m tokens) takes its column-wise
  // operands as transposed views (fp8_columns): fp8_block where gemm_chunk_scaled runs it, which
  // would also run it on the transposed copies (the same numbers either way).
  bool fp8_columns(int64_t n, int64_t k, int64_t m) const {
    return act.scheme == BlockScheme::fp8_block && promote == 0 && gemm_chunk_scaled_runs(n, k, m);
  }
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

// y [M, N] = a [M, K] . b [N, K]^T, both quantized along K (see the top of this file).
Tensor gemm_nt(const Operand& a, const Operand& b, int promote) {
  if (promote > 0) return gemm_promoted(a.v, b.v, promote);
  const int64_t M = a.v.size(0), K = a.v.size(1), N = b.v.size(0);
  if (a.tiles.empty()) {  // nvfp4, mxfp4: one bf16 GEMM, the per-tensor factors on the result
    Tensor y = host_empty(M, N, DType::fp32);
    gemm(y, a.v, b.v.t());
    const float f = a.scale * b.scale;
    if (f != 1.0f) {
      float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (M * N >= (int64_t{1} << 16))
      for (int64_t i = 0; i < M * N; ++i) py[i] *= f;
      y.bump_version();
    }
    return y;
  }
  // fp8_block: per 128-wide K chunk, a bf16 GEMM of the E4M3 values, times the chunk's scales of
  // row m and column n, added in fp32 in chunk order.
  Tensor y = host_empty(M, N, DType::fp32);
  const size_t mn = static_cast<size_t>(M * N);
  if (K == 0) {
    y.fill_(0.0);
    return y;
  }
  const int64_t chunks = (K + 127) / 128;
  // One pass where this CPU has the fused kernel (mixp/backend/gemm.h): the same numbers. Asked
  // first: where it declines (AMX hosts, small shapes) the scale arrays are not built.
  if (gemm_chunk_scaled_runs(y, a.v, b.v.t())) {
    std::vector<float> ra(static_cast<size_t>(M * chunks)), cb(static_cast<size_t>(chunks * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < chunks; ++c) ra[static_cast<size_t>(m * chunks + c)] = a.tile(m, c);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < chunks; ++c) cb[static_cast<size_t>(c * N + n)] = b.tile(n, c);
    if (gemm_chunk_scaled(y, a.v, b.v.t(), ra.data(), cb.data())) return y;
  }
  Tensor part = host_empty(M, N, DType::fp32);
  std::vector<float> sa(static_cast<size_t>(M)), sb(static_cast<size_t>(N));
  const Tensor av = a.view ? a.v.contiguous() : a.v, bv = b.view ? b.v.contiguous() : b.v;
  for (int64_t c = 0; c * 128 < K; ++c) {
    const int64_t k0 = c * 128, k1 = std::min(K, k0 + 128);
    gemm(part, av.slice(1, k0, k1), bv.slice(1, k0, k1).t());
    for (int64_t m = 0; m < M; ++m) sa[static_cast<size_t>(m)] = a.tile(m, c);
    for (int64_t n = 0; n < N; ++n) sb[static_cast<size_t>(n)] = b.tile(n, c);
    block_scaled_accumulate(std::span<float>(y.data<float>(), mn),
                            std::span<const float>(part.data<float>(), mn), M, N, sa, sb, c == 0);
  }
  y.bump_version();
  return y;
}

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
  // On a GPU the operands stay there (block_linear_cuda.cpp), but for the emulated limited
  // accumulator and an installed observer, which read host memory: those copy to the host.
  if (dev.kind == DeviceKind::cuda && plan.promote == 0 && !block_observer())
    return block_scaled_linear_cuda(x, w, b, act,
                                    {plan.act, plan.weight, plan.grad, plan.rht, value_seed, kRoleG,
                                     kRoleGc});

  Tensor x2 = host_f32(mixp::detail::raw_reshape(mixp::detail::raw_contiguous(x),
                                                 Shape{K ? x.numel() / K : 0, K}));
  Tensor wf = host_f32(w);
  const int64_t M = x2.size(0);
  const bool f32 = plan.promote > 0;  // the emulated accumulator multiplies fp32 values
  const bool fp8c = plan.fp8_columns(N, K, M);
  // The layer (owner of meta) outlives its backward; the observer only names it.
  const Fp8LinearMeta* obs = &meta;
  Tensor y;
  Operand keep_xc, keep_w;
  {
    NoGradGuard ng;
    const Operand xq = quantize(x2, plan.act, kRoleX, f32, obs);
    if (need_dw)  // [K, Mp]
      keep_xc = fp8c ? fp8_columns(x2, plan.act, kRoleXc, obs)
                     : columns(x2, plan.act, plan.rht, kRoleXc, f32, obs);
    const Operand wq = quantize(wf, plan.weight, kRoleW, f32, obs);
    if (need_dx)  // W^T [K, N], quantized along N
      keep_w = plan.square_weight ? transposed(wq)
                                  : columns(wf, plan.weight, false, kRoleWc, f32, obs);
    y = gemm_nt(xq, wq, plan.promote);
    if (dev.kind != DeviceKind::cpu) y = y.to(dev);
    Tensor bf = b.defined() ? mixp::detail::raw_contiguous(
                                  mixp::detail::as_compute(b.detach(), DType::fp32))
                            : Tensor();
    backend_for(y, bf).scale_bias_act(y, y, bf, 1.0f, relu ? Activation::relu : Activation::none);
  }
  Tensor out = linear_output(y, x.shape(), N);
  if (!rec) return out;

  Tensor keep_y = relu ? y.detach() : Tensor();
  const Shape x_shape = x.shape();
  mixp::detail::record(
      OpId::linear, DType::fp32, {&x, &w, &b}, {&out},
      [keep_xc, keep_w, keep_y, plan, x_shape, M, N, dev, fp8c, obs](BackwardContext& ctx) {
        Tensor g = linear_output_grad(ctx.grad(), keep_y, M, N);
        if (ctx.needs(2)) ctx.grad_inputs[2] = sum(g, Shape{0}, false);
        if (!ctx.needs(0) && !ctx.needs(1)) return;
        const Tensor gh = host_f32(g);
        if (ctx.needs(0)) {  // dx [M, K] = g [M, N] @ w [N, K], blocks along N
          Tensor dx = gemm_nt(quantize(gh, plan.grad, kRoleG, plan.promote > 0, obs), keep_w,
                              plan.promote);
          if (dev.kind != DeviceKind::cpu) dx = dx.to(dev);
          ctx.grad_inputs[0] = mixp::detail::raw_reshape(dx, x_shape);
        }
        if (ctx.needs(1)) {  // dw [N, K] = g^T [N, M] @ x [M, K], blocks along M
          const Operand gc = fp8c ? fp8_columns(gh, plan.grad, kRoleGc, obs)  // [N, Mp]
                                  : columns(gh, plan.grad, plan.rht, kRoleGc, plan.promote > 0, obs);
          Tensor dw = gemm_nt(gc, keep_xc, plan.promote);
          if (dev.kind != DeviceKind::cpu) dw = dw.to(dev);
          ctx.grad_inputs[1] = dw;
        }
      });
  return out;
}

}  // namespace mixp::amp::detail

namespace mixp::amp {

void set_block_operand_observer(BlockOperandObserver observer) {
  detail::block_observer() = std::move(observer);
}

}  // namespace mixp::amp
