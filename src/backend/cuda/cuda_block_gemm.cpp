// The block-scaled recipes on cuda (mixp/backend/cuda_block.h; docs/cuda.md "Block-scaled
// recipes"): the quantizers (cuda_block_quant.cu) and the GEMM, on cuBLASLt's block-scaling
// modes (cublasLt.h, cublasLtMatmulMatrixScale_t) where the GPU has them, else on the bf16 GEMM
// of the dequantized operands, as the CPU emulation (src/amp/block_linear.cpp gemm_nt) does.
//
// cuBLASLt is column-major: y [M, N] row-major is the N x M column-major D, computed as
// D = A^T B with cuBLASLt's A our b [N, K] (stored K x N, op T) and its B our a [M, K] (K x M,
// op N), the "TN" layout of its FP8 and FP4 kernels. So cuBLASLt's A scales are b's and its B
// scales a's, each in the layout of its mode (block_quant_math.h: VEC16/VEC32 in 128x4 tiles,
// VEC128 K-block-major with the rows padded to 4, BLK128x128 row-major with the K blocks padded
// to 4).
#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_quant_kernels.h"
#include "backend/cuda/cuda_quant_kernels.h"
#include "format/block_quant_math.h"
#include "format/block_scaled_kernels.h"
#include "mixp/backend/cuda_block.h"

namespace mixp::cuda {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("mixp: block-scaled quantization on cuda: " + what);
}

Tensor dev_empty(Shape s, DType d, const Device& dev) {
  return Tensor::empty(std::move(s), {.dtype = d, .device = dev});
}

// x as a contiguous fp32 [R, C] cuda tensor.
Tensor as_rows(const Tensor& x, const char* who) {
  if (x.device().kind != DeviceKind::cuda) refuse(std::string(who) + " takes a cuda tensor");
  if (x.dim() != 2) refuse(fmt::format("{} takes a 2-d tensor, not {}-d", who, x.dim()));
  if (x.dtype() != DType::fp32)
    refuse(fmt::format("{} takes fp32 values, not {}", who, name(x.dtype())));
  return x.is_contiguous() ? x : x.contiguous();
}

// The launch arguments of one quantization of x [R, C] (tw along C), outputs left null.
BlockQuantArgs args_of(const Tensor& x, const BlockScaledOptions& o, const float* amax) {
  BlockQuantArgs a;
  a.kind = static_cast<int>(o.scheme);
  a.th = o.tile_rows;
  a.tw = block_scaled_tile_cols(o.scheme);
  a.pow2 = o.pow2_scales;
  a.sr = o.round == Round::stochastic;
  a.seed = o.seed;
  a.x = static_cast<const float*>(dev_ptr(x));
  a.rows = x.shape()[0];
  a.cols = x.shape()[1];
  a.amax = amax;
  return a;
}

// block_scaled_check's rules on the options (tile shapes, roundings), for an empty tensor.
void check_options(const BlockScaledOptions& o) {
  try {
    mixp::detail::block_scaled_check({}, 0, 0, o);
  } catch (const std::invalid_argument& e) {
    refuse(e.what());
  }
}

// One quantization on the device; which outputs: codes, the GEMM factors (bf16), deq (fp32).
struct Quantized {
  Tensor codes, scales, scale_codes, amax, factors, deq;
  int64_t gr = 0, gc = 0;
};
Quantized quantize(DeviceContext& ctx, const Tensor& x, const BlockScaledOptions& o, bool codes,
                   bool factors, bool deq) {
  check_options(o);
  const Device dev = x.device();
  const int64_t R = x.shape()[0], C = x.shape()[1];
  const int th = o.tile_rows, tw = block_scaled_tile_cols(o.scheme);
  Quantized q;
  q.gr = (R + th - 1) / th;
  q.gc = (C + tw - 1) / tw;
  if (o.scheme == BlockScheme::nvfp4) {
    q.amax = dev_empty(Shape{1}, DType::fp32, dev);
    launch_amax(static_cast<float*>(dev_ptr(q.amax)), static_cast<const float*>(dev_ptr(x)), R * C,
                ctx.stream);
    MIXP_CUDA_CHECK_LAUNCH();
  }
  BlockQuantArgs a =
      args_of(x, o, q.amax.defined() ? static_cast<const float*>(dev_ptr(q.amax)) : nullptr);
  q.scales = dev_empty(Shape{q.gr, q.gc}, DType::fp32, dev);
  a.scales = static_cast<float*>(dev_ptr(q.scales));
  if (o.scheme != BlockScheme::fp8_block) {
    q.scale_codes = dev_empty(Shape{q.gr, q.gc}, DType::uint8, dev);
    a.scale_codes = static_cast<uint8_t*>(dev_ptr(q.scale_codes));
  }
  if (codes) {
    q.codes = dev_empty(Shape{R, C}, DType::uint8, dev);
    a.codes = static_cast<uint8_t*>(dev_ptr(q.codes));
  }
  if (factors) {
    q.factors = dev_empty(Shape{R, C}, DType::bf16, dev);
    a.factors = static_cast<uint16_t*>(dev_ptr(q.factors));
  }
  if (deq) {
    q.deq = dev_empty(Shape{R, C}, DType::fp32, dev);
    a.deq = static_cast<float*>(dev_ptr(q.deq));
  }
  launch_block_quantize(a, ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  for (Tensor* t : {&q.codes, &q.scales, &q.scale_codes, &q.factors, &q.deq})
    if (t->defined()) t->bump_version();
  return q;
}

void check_pair(const Tensor& a, const Tensor& b, const BlockScaledOptions& oa,
                const BlockScaledOptions& ob) {
  if (oa.scheme != ob.scheme)
    refuse(fmt::format("a GEMM of {} x {} operands (one scheme for both)", to_string(oa.scheme),
                       to_string(ob.scheme)));
  if (a.shape()[1] != b.shape()[1])
    refuse(fmt::format("a GEMM of [{}, {}] x [{}, {}]^T", a.shape()[0], a.shape()[1], b.shape()[0],
                       b.shape()[1]));
  if (a.device() != b.device()) refuse("operands on two devices");
}

const float* fptr(const Tensor& t) { return static_cast<const float*>(dev_ptr(t)); }
float* fptr_mut(const Tensor& t) { return static_cast<float*>(dev_ptr(t)); }

// The dequantize path: bf16 GEMMs of the exact factors with fp32 accumulation, then the
// per-tensor factors (nvfp4) or, per 128-wide K chunk, the two tiles' scales (fp8_block).
Tensor gemm_dequantized(DeviceContext& ctx, const Tensor& a, const Tensor& b,
                        const BlockScaledOptions& oa, const BlockScaledOptions& ob) {
  const Device dev = a.device();
  const int64_t M = a.shape()[0], N = b.shape()[0], K = a.shape()[1];
  Tensor y = dev_empty(Shape{M, N}, DType::fp32, dev);
  if (M == 0 || N == 0) return y;
  float* py = fptr_mut(y);
  if (K == 0) {
    MIXP_CUDA_CHECK(cudaMemsetAsync(py, 0, static_cast<size_t>(M * N) * sizeof(float), ctx.stream));
    y.bump_version();
    return y;
  }
  const Quantized qa = quantize(ctx, a, oa, false, true, false);
  const Quantized qb = quantize(ctx, b, ob, false, true, false);
  MatmulConfig cfg;
  cfg.compute = DType::bf16;
  if (oa.scheme != BlockScheme::fp8_block) {
    gemm_lt(ctx, y, qa.factors, qb.factors.t(), Tensor(), cfg);
    if (oa.scheme == BlockScheme::nvfp4) {
      launch_scale_by_product(py, M * N, fptr(qa.amax), fptr(qb.amax), ctx.stream);
      MIXP_CUDA_CHECK_LAUNCH();
    }
    y.bump_version();
    return y;
  }
  const int64_t chunks = qa.gc;
  Tensor sa = dev_empty(Shape{chunks, M}, DType::fp32, dev);
  Tensor sb = dev_empty(Shape{chunks, N}, DType::fp32, dev);
  launch_expand_tile_scales(fptr_mut(sa), fptr(qa.scales), M, chunks, oa.tile_rows, ctx.stream);
  launch_expand_tile_scales(fptr_mut(sb), fptr(qb.scales), N, chunks, ob.tile_rows, ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  Tensor part = dev_empty(Shape{M, N}, DType::fp32, dev);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = c * 128, k1 = std::min(K, k0 + 128);
    gemm_lt(ctx, part, qa.factors.slice(1, k0, k1), qb.factors.slice(1, k0, k1).t(), Tensor(), cfg);
    launch_block_accumulate(py, fptr(part), M, N, fptr(sa) + c * M, fptr(sb) + c * N, c == 0,
                            ctx.stream);
    MIXP_CUDA_CHECK_LAUNCH();
  }
  y.bump_version();
  return y;
}

// One operand for cuBLASLt: its data (E4M3 bytes, or E2M1 two per byte) and its scales in the
// layout of its mode.
struct NativeOperand {
  Quantized q;
  Tensor data, scales;
  int32_t mode = 0;
};
NativeOperand native_operand(DeviceContext& ctx, const Tensor& x, const BlockScaledOptions& o) {
  NativeOperand n;
  n.q = quantize(ctx, x, o, true, false, false);
  const Device dev = x.device();
  const int64_t R = x.shape()[0], C = x.shape()[1];
  if (o.scheme == BlockScheme::fp8_block) {
    n.data = n.q.codes;
    if (o.tile_rows == 1) {
      n.mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      n.scales = dev_empty(Shape{block_math::vec128_scale_count(R, n.q.gc)}, DType::fp32, dev);
      launch_pack_vec128_scales(fptr_mut(n.scales), fptr(n.q.scales), R, n.q.gc, ctx.stream);
    } else {
      n.mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      n.scales = dev_empty(Shape{block_math::blk128_scale_count(R, n.q.gc)}, DType::fp32, dev);
      launch_pack_blk128_scales(fptr_mut(n.scales), fptr(n.q.scales), n.q.gr, n.q.gc, ctx.stream);
    }
  } else {
    n.data = dev_empty(Shape{R, C / 2}, DType::uint8, dev);
    launch_pack_fp4(static_cast<uint8_t*>(dev_ptr(n.data)),
                    static_cast<const uint8_t*>(dev_ptr(n.q.codes)), R * C, ctx.stream);
    n.mode = o.scheme == BlockScheme::nvfp4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                            : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    n.scales = dev_empty(Shape{block_math::vec_scale_bytes(R, n.q.gc)}, DType::uint8, dev);
    launch_pack_vec_scales(static_cast<uint8_t*>(dev_ptr(n.scales)),
                           static_cast<const uint8_t*>(dev_ptr(n.q.scale_codes)), R, n.q.gc,
                           o.tile_rows, ctx.stream);
  }
  MIXP_CUDA_CHECK_LAUNCH();
  return n;
}

// The native path; false (y untouched) when cuBLASLt cannot take this GEMM.
bool gemm_native(DeviceContext& ctx, Tensor& y, const Tensor& a, const Tensor& b,
                 const BlockScaledOptions& oa, const BlockScaledOptions& ob) {
  const bool fp8 = oa.scheme == BlockScheme::fp8_block;
  const int64_t M = a.shape()[0], N = b.shape()[0], K = a.shape()[1];
  if (M == 0 || N == 0 || K == 0 || K % (fp8 ? 16 : 32) != 0) return false;
  if (fp8 && oa.tile_rows == 128 && ob.tile_rows == 128) return false;  // no 2-D x 2-D kernel
  const NativeOperand na = native_operand(ctx, a, oa), nb = native_operand(ctx, b, ob);
  const cudaDataType_t t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_4F_E2M1;
  LtDescs d;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t bytes) {
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, attr, v, bytes));
  };
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN));
  // cuBLASLt's A is b, its B is a (the comment at the top).
  const void* a_scales = dev_ptr(nb.scales);
  const void* b_scales = dev_ptr(na.scales);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &nb.mode, sizeof(nb.mode));
  set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &na.mode, sizeof(na.mode));
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof(a_scales));
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof(b_scales));
  const auto uK = static_cast<uint64_t>(K);
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.a, t, uK, static_cast<uint64_t>(N), K));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.b, t, uK, static_cast<uint64_t>(M), K));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, static_cast<uint64_t>(N),
                                                    static_cast<uint64_t>(M), N));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceCreate(&d.pref));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_bytes,
      sizeof(ctx.workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const cublasStatus_t hs = lt().cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c,
                                                                d.pref, 1, &heur, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "mixp: warning: cuBLASLt has no %s block-scaled GEMM for %lld x %lld x %lld on "
                   "sm_%d%d; running it (and any other such) on the dequantized bf16 path\n",
                   std::string(to_string(oa.scheme)).c_str(), static_cast<long long>(M),
                   static_cast<long long>(N), static_cast<long long>(K), ctx.cc_major,
                   ctx.cc_minor);
    });
    return false;
  }
  const float alpha = 1.0f, beta = 0.0f;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmul(ctx.lt, d.op, &alpha, dev_ptr(nb.data), d.a,
                                        dev_ptr(na.data), d.b, &beta, dev_ptr(y), d.c, dev_ptr(y),
                                        d.c, &heur.algo, ctx.workspace, ctx.workspace_bytes,
                                        ctx.stream));
  if (oa.scheme == BlockScheme::nvfp4) {  // the per-tensor factors after the GEMM, as the CPU
    launch_scale_by_product(fptr_mut(y), M * N, fptr(na.q.amax), fptr(nb.q.amax), ctx.stream);
    MIXP_CUDA_CHECK_LAUNCH();
  }
  y.bump_version();
  return true;
}

}  // namespace
}  // namespace mixp::cuda

namespace mixp {

BlockScaledTensor CudaBlockTensor::to_host() const {
  BlockScaledTensor q;
  q.scheme = scheme;
  q.rows = rows;
  q.cols = cols;
  q.tile_rows = tile_rows;
  q.tile_cols = tile_cols;
  q.codes = codes.to(Device::cpu()).to_vector<uint8_t>();
  q.scales = scales.to(Device::cpu()).to_vector<float>();
  if (scale_codes.defined()) q.scale_codes = scale_codes.to(Device::cpu()).to_vector<uint8_t>();
  if (amax.defined()) q.global_amax = amax.to(Device::cpu()).to_vector<float>()[0];
  return q;
}

CudaBlockTensor cuda_block_quantize(const Tensor& x_in, const BlockScaledOptions& opt) {
  using namespace mixp::cuda;
  const Tensor x = as_rows(x_in, "cuda_block_quantize");
  DeviceContext& ctx = context(x.device().index);
  Quantized q = quantize(ctx, x, opt, true, false, false);
  CudaBlockTensor t;
  t.scheme = opt.scheme;
  t.rows = x.shape()[0];
  t.cols = x.shape()[1];
  t.tile_rows = opt.tile_rows;
  t.tile_cols = block_scaled_tile_cols(opt.scheme);
  t.codes = std::move(q.codes);
  t.scales = std::move(q.scales);
  t.scale_codes = std::move(q.scale_codes);
  t.amax = std::move(q.amax);
  return t;
}

Tensor cuda_block_fake_quantize(const Tensor& x_in, const BlockScaledOptions& opt) {
  using namespace mixp::cuda;
  const Tensor x = as_rows(x_in, "cuda_block_fake_quantize");
  return quantize(context(x.device().index), x, opt, false, false, true).deq;
}

Tensor cuda_block_gemm_nt(const Tensor& a_in, const Tensor& b_in, const BlockScaledOptions& opt_a,
                          const BlockScaledOptions& opt_b, BlockGemmPath* used,
                          const BlockGemmPath* force) {
  using namespace mixp::cuda;
  const Tensor a = as_rows(a_in, "cuda_block_gemm_nt"), b = as_rows(b_in, "cuda_block_gemm_nt");
  check_pair(a, b, opt_a, opt_b);
  check_options(opt_a);
  check_options(opt_b);
  DeviceContext& ctx = context(a.device().index);
  const BlockGemmPath want =
      force ? *force : block_gemm_path(opt_a.scheme, ctx.cc_major, ctx.cc_minor);
  if (want == BlockGemmPath::cublaslt) {
    Tensor y = dev_empty(Shape{a.shape()[0], b.shape()[0]}, DType::fp32, a.device());
    if (gemm_native(ctx, y, a, b, opt_a, opt_b)) {
      if (used) *used = BlockGemmPath::cublaslt;
      return y;
    }
  }
  if (used) *used = BlockGemmPath::dequantize;
  return gemm_dequantized(ctx, a, b, opt_a, opt_b);
}

Tensor cuda_block_columns(const Tensor& x_in, bool rht) {
  using namespace mixp::cuda;
  const Tensor x = as_rows(x_in, "cuda_block_columns");
  const int64_t R = x.shape()[0], C = x.shape()[1], rp = rht ? (R + 15) / 16 * 16 : R;
  DeviceContext& ctx = context(x.device().index);
  Tensor out = dev_empty(Shape{C, rp}, DType::fp32, x.device());
  launch_columns(fptr_mut(out), fptr(x), R, C, rp, ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  if (rht && C * rp > 0) launch_rht16(fptr_mut(out), C * rp / 16, ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  out.bump_version();
  return out;
}

void cuda_rht16_rows(Tensor& x) {
  using namespace mixp::cuda;
  if (x.device().kind != DeviceKind::cuda || x.dtype() != DType::fp32 || !x.is_contiguous() ||
      x.dim() != 2 || x.shape()[1] % 16 != 0)
    refuse("cuda_rht16_rows takes a contiguous fp32 [rows, 16 k] cuda tensor");
  DeviceContext& ctx = context(x.device().index);
  launch_rht16(static_cast<float*>(dev_ptr(x)), x.numel() / 16, ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  x.bump_version();
}

}  // namespace mixp
