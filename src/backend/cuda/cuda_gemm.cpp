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

#include <stdexcept>

#include "backend/cuda/cuda_backend.h"

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

// RAII for the cuBLASLt descriptors.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride) {
  if (count <= 1) return;
  MIXP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
  MIXP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
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
  MIXP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  MIXP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ob.op,
                                                   sizeof(ob.op)));
  MIXP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &oa.op,
                                                   sizeof(oa.op)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const bool has_bias = bias.defined();
  switch (cfg.activation) {
    case Activation::none: epi = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case Activation::relu: epi = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; break;
    case Activation::gelu: epi = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; break;
  }
  MIXP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  Tensor bias_c;
  if (has_bias) {
    bias_c = bias.contiguous();
    const void* bp = dev_ptr(bias_c);
    const cudaDataType_t bt = data_type(bias_c.dtype());
    MIXP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                                     sizeof(bp)));
    MIXP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &bt, sizeof(bt)));
  }
  MIXP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, in_t, ob.rows, ob.cols, ob.ld));
  MIXP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, in_t, oa.rows, oa.cols, oa.ld));
  MIXP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, out_t, static_cast<uint64_t>(N),
                                               static_cast<uint64_t>(M), N));
  const auto nb = static_cast<int32_t>(batch);
  set_batch(d.a, nb, ob.batch_stride);
  set_batch(d.b, nb, oa.batch_stride);
  set_batch(d.c, nb, M * N);

  MIXP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  MIXP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_bytes,
      sizeof(ctx.workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  MIXP_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                                   &heur, &found));
  if (found == 0)
    unsupported(fmt::format("this GEMM ({} x {} x {}, {} -> {}): cuBLASLt has no algorithm", M, N,
                            K, name(cfg.compute), name(dst.dtype())));
  const float alpha = 1.0f, beta = cfg.accumulate ? 1.0f : 0.0f;
  MIXP_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, d.op, &alpha, dev_ptr(ob.t), d.a, dev_ptr(oa.t),
                                   d.b, &beta, dev_ptr(dst), d.c, dev_ptr(dst), d.c,
                                   &heur.algo, ctx.workspace, ctx.workspace_bytes, ctx.stream));
}

}  // namespace mixp::cuda
