// FP8 and MXFP8 quantization for the emulated FP8 GEMMs (docs/architecture.md 3.5: "fp8 values are
// exact in bf16, so fp8 GEMMs can run on the bf16 path").
//
// Per-tensor scaling (delayed or current): a tensor x is quantized to the codes
// q = saturate_fp8(x * scale) (round to nearest even; |x * scale| above the format's max finite,
// and +-inf, give +-max finite; NaN stays NaN), and q means q * scale_inv. The codes are kept as
// their exact bf16 values (an E4M3/E5M2 value has at most 4 significant bits and an exponent
// inside bf16's range), so a GEMM of two quantized tensors runs as a bf16 x bf16 -> fp32 oneDNN
// GEMM on the raw codes, and the two scale_invs are applied to the fp32 result:
//     x @ w^T  ~=  (q_x @ q_w^T) * (scale_inv_x * scale_inv_w)
// which is what TransformerEngine and cuBLASLt do (the A/B scale pointers of an FP8
// cublasLtMatmul scale the fp32 accumulator). Folding scale_inv into the bf16 values instead
// would not be exact unless the scale is a power of two.
//
// MXFP8 (OCP MX v1.0): blocks of 32 values along the reduction dimension share an e8m0 scale
// 2^e; each element is P_i = saturate_fp8(x_i / 2^e) and means P_i * 2^e. The per-block scale
// cannot be taken out of the GEMM, so the blocks are dequantized to bf16 and multiplied there.
// P_i * 2^e is exact in bf16 whenever it is at least 2^-133 (bf16's smallest subnormal; P_i is a
// multiple of 2^-9 for E4M3, so every element of a block with e >= -124, i.e. block amax >=
// 2^-116, is exact); and oneDNN's bf16 kernel (VDPBF16PS) treats bf16 subnormals (below 2^-126)
// as zero. Only blocks whose largest value is below about 2^-117 lose anything, and those add
// nothing visible to an fp32 sum that holds normal-sized terms.
#pragma once
#include <cstdint>
#include <span>

#include "mixp/format/dtype.h"
#include "mixp/tensor/tensor.h"

namespace mixp::amp {

// max |x| (NaN ignored, inf counts), parallel over the OpenMP threads.
float fp8_amax(std::span<const float> x);

// out[i] = bf16 bits of saturate_fp8(x[i] * scale), fp8 = fp8_e4m3 or fp8_e5m2. Returns the amax
// of x (as fp8_amax), computed in the same pass (delayed scaling records it). Parallel.
float fp8_quantize_to_bf16(std::span<const float> x, DType fp8, float scale,
                           std::span<uint16_t> out);

// MXFP8: x holds rows of `row_len` values; blocks of `block` along each row. out[i] = bf16 of
// the dequantized element (exactly mx_fake_quantize's value, rounded to bf16 as above).
void mxfp8_quantize_to_bf16(std::span<const float> x, int64_t row_len, DType fp8, int block,
                            std::span<uint16_t> out);

// A quantized tensor as the GEMMs consume it: `data` holds the fp8 codes (same shape as the
// source) as bf16 values, or per-tensor scaled on a device whose backend has FP8 GEMMs
// (Backend::fp8_matmul(): cuda on sm_89+) as the fp8 codes themselves, which mixp::gemm hands to
// the native FP8 GEMM (docs/cuda.md); `scale_inv` is what they mean (1 for MX, whose block
// scales are already applied), `amax` the source's max |x|.
struct Fp8Quantized {
  Tensor data;  // bf16 (or fp8 as said above), contiguous
  float scale = 1.0f;
  float scale_inv = 1.0f;
  float amax = 0.0f;
};

// MXFP8 rows of xf (fp32, contiguous, blocks along its last dimension) as a new bf16 tensor on
// its device (not recorded).
Tensor mxfp8_rows(const Tensor& xf, DType fp8, int block);
// MXFP8 columns of xf ([R, C] fp32, blocks along dim 0: `block` consecutive rows of a column)
// as a new bf16 [R, C] tensor in xf's layout: the values mxfp8_rows gives for the rows of xf's
// transpose (the same bits), without a transposed copy on the host backends; not recorded.
// MXFP8's column-wise GEMM operands (amp/fp8_linear.cpp) are these, read as transposed views.
Tensor mxfp8_column_blocks(const Tensor& xf, DType fp8, int block);
// The [C, R] tensor mxfp8_rows gives for the contiguous transpose of xf: a bf16 transposed copy
// of mxfp8_column_blocks; not recorded.
Tensor mxfp8_columns(const Tensor& xf, DType fp8, int block);

// Per-tensor quantization of any floating tensor (converted to fp32 first when it is not);
// not recorded by autograd. scale must be finite and > 0.
Fp8Quantized fp8_quantize(const Tensor& x, DType fp8, float scale);
// Current scaling: scale = fp8_scale_from_amax(amax(x), fp8_max, margin, 1).
Fp8Quantized fp8_quantize_current(const Tensor& x, DType fp8, int margin = 0);
// MXFP8 along the last dimension.
Fp8Quantized mxfp8_quantize(const Tensor& x, DType fp8, int block = 32);

// The FP8 GEMM: (a.data @ b.data) * a.scale_inv * b.scale_inv, a [M, K] and b [K, N] (either
// may be a transposed view), through mixp::gemm: on the cpu the bf16 x bf16 -> fp32 oneDNN path
// (exact products, fp32 accumulation), on cuda sm_89+ cuBLASLt's FP8 GEMM. MX operands
// (scale_inv 1) pass through unchanged. Not recorded.
Tensor fp8_gemm(const Fp8Quantized& a, const Fp8Quantized& b);

// Quantize-dequantize with a straight-through gradient (the gradient passes unchanged, as for
// fake quantization): fp32 result x_q = q * scale_inv. For experiments and tests; the FP8
// linear layers use fp8_linear (fp8_linear.h), which keeps the codes for the GEMM instead.
Tensor fp8_fake_quantize(const Tensor& x, DType fp8, float scale);

}  // namespace mixp::amp
