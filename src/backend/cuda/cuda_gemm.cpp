// matmul on cuda through cuBLASLt: fp32 (CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when
// MatmulConfig::tf32 says the operands are tf32), bf16 and fp16 operands with fp32
// accumulation (CUBLAS_COMPUTE_32F; dst bf16/fp16 or fp32), bias and ReLU/GELU (tanh) epilogues,
// batches with a batch stride of 0 for broadcast operands, and dst += a @ b (beta = 1).
//
// cuBLASLt is column-major. The row-major dst [M, N] is the column-major N x M matrix with
// leading dimension N, so dst = a @ b is computed as dst^T = b^T a^T: cuBLASLt's "A" is b and its
// "B" is a. A row-major operand with unit column stride is, read column-major, its own transpose
// (no op); one with unit row stride (a transposed view, as the backward GEMMs pass) is read with
// CUBLAS_OP_T. Any other layout is copied to a contiguous one first.
#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_quant_kernels.h"
#include "backend/narrow.h"
#include "backend/cuda_entry.h"
#include "mixp/backend/cuda_gemm.h"

namespace mixp::cuda {
namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw std::runtime_error(
      fmt::format("mixp: matmul on cuda: {} is not implemented on cuda yet (docs/cuda.md)", what));
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::fp32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp16: return CUDA_R_16F;
    default: unsupported(std::string("dtype ") + std::string(name(t)));
  }
}

// One operand as cuBLASLt sees it (column-major), after the transposition explained above.
struct Operand {
  Tensor t;  // the tensor whose memory is read (a contiguous copy when needed)
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;  // of the stored column-major matrix
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// A row-major [R, C] (last two dims) operand, read column-major.
Operand operand_of(const Tensor& x) {
  const int n = x.dim();
  const int64_t R = x.shape()[n - 2], C = x.shape()[n - 1];
  const int64_t sr = x.strides()[n - 2], sc = x.strides()[n - 1];
  Operand o;
  o.t = x;
  if ((sc == 1 || C == 1) && sr >= std::max<int64_t>(C, 1)) {  // row-major rows: col-major C x R
    o.op = CUBLAS_OP_N;
    o.rows = static_cast<uint64_t>(C);
    o.cols = static_cast<uint64_t>(R);
    o.ld = sr;
  } else if ((sr == 1 || R == 1) && sc >= std::max<int64_t>(R, 1)) {  // col-major R x C, then ^T
    o.op = CUBLAS_OP_T;
    o.rows = static_cast<uint64_t>(R);
    o.cols = static_cast<uint64_t>(C);
    o.ld = sc;
  } else {
    o.t = x.contiguous();
    o.op = CUBLAS_OP_N;
    o.rows = static_cast<uint64_t>(C);
    o.cols = static_cast<uint64_t>(R);
    o.ld = std::max<int64_t>(C, 1);
  }
  o.batch_stride = n == 3 ? o.t.strides()[0] : 0;
  return o;
}


void set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride) {
  if (count <= 1) return;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

// cuBLASLt's first choice of algorithm for d within the context's workspace; false when it has
// none for these types and layouts.
bool best_algorithm(DeviceContext& ctx, LtDescs& d, cublasLtMatmulHeuristicResult_t& heur) {
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceCreate(&d.pref));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_bytes,
      sizeof(ctx.workspace_bytes)));
  int found = 0;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                                   &heur, &found));
  return found != 0;
}

}  // namespace

void gemm_lt(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
             const MatmulConfig& cfg) {
  if (cfg.compute != DType::fp32 && cfg.compute != DType::bf16 && cfg.compute != DType::fp16)
    unsupported(std::string("compute dtype ") + std::string(name(cfg.compute)));
  if (cfg.accumulate && cfg.activation != Activation::none)
    unsupported("an activation epilogue with accumulate");
  if (!dst.is_contiguous()) unsupported("a strided destination");
  const int64_t M = dst.shape()[dst.dim() - 2], N = dst.shape()[dst.dim() - 1];
  const int64_t K = a.shape()[a.dim() - 1];
  const int64_t batch = dst.dim() == 3 ? dst.shape()[0] : 1;
  if (M == 0 || N == 0) return;
  if (K == 0) unsupported("an empty inner dimension");
  const Operand ob = operand_of(b);  // cuBLASLt's A: N x K after its op
  const Operand oa = operand_of(a);  // cuBLASLt's B: K x M after its op
  const cudaDataType_t in_t = data_type(cfg.compute);
  if (a.dtype() != cfg.compute || b.dtype() != cfg.compute)
    unsupported(fmt::format("operands of dtype {} x {} with compute {}", name(a.dtype()),
                            name(b.dtype()), name(cfg.compute)));
  const cudaDataType_t out_t = data_type(dst.dtype());

  LtDescs d;
  // TF32 Tensor Cores when the front end asked for tf32 (its operands are on the tf32 grid).
  const cublasComputeType_t compute = cfg.tf32 && cfg.compute == DType::fp32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ob.op,
                                                   sizeof(ob.op)));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &oa.op,
                                                   sizeof(oa.op)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const bool has_bias = bias.defined();
  switch (cfg.activation) {
    case Activation::none: epi = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case Activation::relu: epi = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; break;
    case Activation::gelu: epi = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; break;
  }
  MIXP_CUBLAS_CHECK(
      lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  Tensor bias_c;
  if (has_bias) {
    bias_c = bias.contiguous();
    const void* bp = dev_ptr(bias_c);
    const cudaDataType_t bt = data_type(bias_c.dtype());
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                                     sizeof(bp)));
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &bt, sizeof(bt)));
  }
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.a, in_t, ob.rows, ob.cols, ob.ld));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.b, in_t, oa.rows, oa.cols, oa.ld));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.c, out_t, static_cast<uint64_t>(N),
                                               static_cast<uint64_t>(M), N));
  const auto nb = static_cast<int32_t>(batch);
  set_batch(d.a, nb, ob.batch_stride);
  set_batch(d.b, nb, oa.batch_stride);
  set_batch(d.c, nb, M * N);

  cublasLtMatmulHeuristicResult_t heur{};
  if (!best_algorithm(ctx, d, heur))
    unsupported(fmt::format("this GEMM ({} x {} x {}, {} -> {}): cuBLASLt has no algorithm", M, N,
                            K, name(cfg.compute), name(dst.dtype())));
  const float alpha = 1.0f, beta = cfg.accumulate ? 1.0f : 0.0f;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmul(ctx.lt, d.op, &alpha, dev_ptr(ob.t), d.a, dev_ptr(oa.t),
                                   d.b, &beta, dev_ptr(dst), d.c, dev_ptr(dst), d.c,
                                   &heur.algo, ctx.workspace, ctx.workspace_bytes, ctx.stream));
}

// --- FP8 and int8 GEMMs (mixp/backend/cuda_gemm.h). cuBLASLt's FP8 and IMMA kernels take the "TN" layout
// only: its A (our b) transposed, its B (our a) not, i.e. a [M, K] with unit column stride and b
// [K, N] with unit row stride (a linear layer's weight [N, K] seen transposed). Other layouts
// are copied into that one first.
namespace {

cudaDataType_t narrow_type(DType t) {
  switch (t) {
    case DType::fp8_e4m3: return CUDA_R_8F_E4M3;
    case DType::fp8_e5m2: return CUDA_R_8F_E5M2;
    case DType::int8: return CUDA_R_8I;
    default: unsupported(std::string("an 8-bit GEMM operand of dtype ") + std::string(name(t)));
  }
}

// a as [M, K] with unit column stride, b as [K, N] with unit row stride (copies when needed).
void tn_operands(const Tensor& a, const Tensor& b, Tensor& a_tn, Tensor& b_tn) {
  if (a.dim() != 2 || b.dim() != 2) unsupported("an 8-bit GEMM of other than 2-d operands");
  a_tn = a.strides()[1] == 1 && a.strides()[0] >= a.shape()[1] ? a : a.contiguous();
  b_tn = b.strides()[0] == 1 && b.strides()[1] >= b.shape()[0]
             ? b
             : b.transpose(0, 1).contiguous().transpose(0, 1);
}

// One TN GEMM through cuBLASLt: dst^T [N, M] = b^T a (column-major), as gemm_lt but with the
// given types and, for FP8, the per-tensor scale pointers. False (nothing run) when cuBLASLt has
// no algorithm for it.
bool gemm_tn(DeviceContext& ctx, Tensor& dst, const Tensor& a_tn, const Tensor& b_tn,
             cublasComputeType_t compute, cudaDataType_t scale_t, const void* alpha,
             const void* beta, const float* scale_a, const float* scale_b, bool fast_accum) {
  const auto M = static_cast<uint64_t>(a_tn.shape()[0]), K = static_cast<uint64_t>(a_tn.shape()[1]);
  const auto N = static_cast<uint64_t>(b_tn.shape()[1]);
  LtDescs d;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&d.op, compute, scale_t));
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  // cuBLASLt's A is our b, its B our a. Without scale pointers the scales are 1.
  if (scale_b)
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &scale_b, sizeof(scale_b)));
  if (scale_a)
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &scale_a, sizeof(scale_a)));
  if (a_tn.dtype() != DType::int8) {  // FP8
    const int8_t fast = fast_accum ? 1 : 0;
    MIXP_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                     sizeof(fast)));
  }
  const cudaDataType_t out_t = dst.dtype() == DType::int32 ? CUDA_R_32I : data_type(dst.dtype());
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.a, narrow_type(b_tn.dtype()), K, N, b_tn.strides()[1]));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.b, narrow_type(a_tn.dtype()), K, M, a_tn.strides()[0]));
  MIXP_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&d.c, out_t, N, M, static_cast<int64_t>(N)));
  cublasLtMatmulHeuristicResult_t heur{};
  if (!best_algorithm(ctx, d, heur)) return false;
  MIXP_CUBLAS_CHECK(lt().cublasLtMatmul(ctx.lt, d.op, alpha, dev_ptr(b_tn), d.a, dev_ptr(a_tn), d.b,
                                   beta, dev_ptr(dst), d.c, dev_ptr(dst), d.c, &heur.algo,
                                   ctx.workspace, ctx.workspace_bytes, ctx.stream));
  return true;
}

std::string no_algorithm(const DeviceContext& ctx, const Tensor& dst, const Tensor& a_tn,
                         const Tensor& b_tn) {
  return fmt::format("this 8-bit GEMM ({} x {} x {}, {} x {} -> {}): cuBLASLt has no algorithm "
                     "on sm_{}{}",
                     a_tn.shape()[0], b_tn.shape()[1], a_tn.shape()[1], name(a_tn.dtype()),
                     name(b_tn.dtype()), name(dst.dtype()), ctx.cc_major, ctx.cc_minor);
}

}  // namespace

bool fp8_gemm_native(const DeviceContext& ctx) {
  return ctx.cc_major * 10 + ctx.cc_minor >= 89;
}

bool fp8_gemm(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b,
              const float* scale_a, const float* scale_b, bool fast_accum) {
  if (!kern::is_fp8(a.dtype()) || !kern::is_fp8(b.dtype()))
    unsupported(fmt::format("fp8 GEMM operands of dtype {} x {}", name(a.dtype()), name(b.dtype())));
  if (!kern::is_fp8_gemm_pair(a.dtype(), b.dtype()))
    unsupported("an E5M2 x E5M2 GEMM (FP8 GEMMs take E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3)");
  if (dst.dtype() != DType::bf16 && dst.dtype() != DType::fp32)
    unsupported("an fp8 GEMM into " + std::string(name(dst.dtype())) + " (bf16 or fp32)");
  if (!dst.is_contiguous() || dst.dim() != 2) unsupported("a strided or non-2-d fp8 GEMM output");
  Tensor a_tn, b_tn;
  tn_operands(a, b, a_tn, b_tn);
  const int64_t K = a.shape()[1];
  if (dst.numel() == 0) return fp8_gemm_native(ctx);
  if (K == 0) unsupported("an empty inner dimension");
  if (fp8_gemm_native(ctx) && K % 16 == 0 && a_tn.strides()[0] % 16 == 0 &&
      b_tn.strides()[1] % 16 == 0) {
    const float alpha = 1.0f, beta = 0.0f;
    if (gemm_tn(ctx, dst, a_tn, b_tn, CUBLAS_COMPUTE_32F, CUDA_R_32F, &alpha, &beta, scale_a,
                scale_b, fast_accum))
      return true;
    // Not expected on sm_89/sm_90 with these alignments; said once, then emulated (the same
    // values) rather than failing a training run.
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "mixp: warning: %s; running it (and any other such) as a bf16 GEMM\n",
                   no_algorithm(ctx, dst, a_tn, b_tn).c_str());
    });
  }
  // Emulated, as on the CPU: the fp8 values are exact in bf16; bf16 GEMM with fp32 accumulation,
  // then the two scales (when given).
  const Device dev = a.device();
  Tensor a16 = Tensor::empty(a.shape(), {.dtype = DType::bf16, .device = dev});
  Tensor b16 = Tensor::empty(b.shape(), {.dtype = DType::bf16, .device = dev});
  Backend& be = detail::cuda_backend(dev.index);
  be.convert(a16, a, Round::nearest_even, Overflow::ieee, 0);
  be.convert(b16, b, Round::nearest_even, Overflow::ieee, 0);
  MatmulConfig cfg;
  cfg.compute = DType::bf16;
  if (!scale_a && !scale_b) {
    gemm_lt(ctx, dst, a16, b16, Tensor(), cfg);
    return false;
  }
  if (!scale_a || !scale_b) unsupported("an fp8 GEMM with one scale (give both or neither)");
  Tensor acc = Tensor::empty(dst.shape(), {.dtype = DType::fp32, .device = dev});
  gemm_lt(ctx, acc, a16, b16, Tensor(), cfg);
  launch_scale_by_two(dev_ptr(dst), dst.dtype() == DType::bf16 ? Elem::bf16 : Elem::f32,
                      static_cast<const float*>(dev_ptr(acc)), acc.numel(), scale_a, scale_b,
                      ctx.stream);
  MIXP_CUDA_CHECK_LAUNCH();
  return false;
}

}  // namespace mixp::cuda

namespace mixp {

bool cuda_fp8_matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& scale_a,
                     const Tensor& scale_b, bool fast_accum) {
  using namespace mixp::cuda;
  for (const Tensor* s : {&scale_a, &scale_b})
    if (s->dtype() != DType::fp32 || s->numel() != 1) unsupported("scales other than fp32 [1]");
  return fp8_gemm(context(a.device().index), dst, a, b, static_cast<const float*>(dev_ptr(scale_a)),
                  static_cast<const float*>(dev_ptr(scale_b)), fast_accum);
}

void cuda_int8_matmul(Tensor& dst, const Tensor& a, const Tensor& b) {
  using namespace mixp::cuda;
  if (a.dtype() != DType::int8 || b.dtype() != DType::int8 || dst.dtype() != DType::int32)
    unsupported("an int8 GEMM other than int8 x int8 -> int32");
  if (!dst.is_contiguous() || dst.dim() != 2) unsupported("a strided or non-2-d int8 GEMM output");
  DeviceContext& ctx = context(a.device().index);
  Tensor a_tn, b_tn;
  tn_operands(a, b, a_tn, b_tn);
  if (a.shape()[1] % 4 != 0) unsupported("an int8 GEMM whose inner dimension is not a multiple of 4");
  const int32_t alpha = 1, beta = 0;
  if (!gemm_tn(ctx, dst, a_tn, b_tn, CUBLAS_COMPUTE_32I, CUDA_R_32I, &alpha, &beta, nullptr,
               nullptr, false))
    unsupported(no_algorithm(ctx, dst, a_tn, b_tn));
}

bool cuda_fp8_gemm_native(int index) {
  return mixp::cuda::fp8_gemm_native(mixp::cuda::context(index));
}

}  // namespace mixp
