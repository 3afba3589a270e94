// The kernel interface every backend implements (docs/architecture.md 3.5, backends).
//
// Contract, for every kernel:
//  - Signatures read dst first, then src, then saved state, then sizes (docs/architecture.md 6.7).
//  - dst tensors are allocated by the op front end, contiguous, of the right shape; kernels only
//    write them (or accumulate where the name says so).
//  - Floating inputs and outputs are in the compute dtype: fp32 or fp64 (the front end converts).
//    The exceptions are the 16-bit paths (docs/amp.md): matmul/conv2d operands in the dtype named
//    by MatmulConfig::compute / Conv2dParams::compute (bf16 or fp16; dst and bias in it or fp32);
//    attention with bf16/fp16 q, k, v, dst (lse fp32); and the pointwise kernels (unary,
//    unary_backward, binary, scalar, dropout, add_inplace) and sum/mean reductions, whose
//    operands and dst may be bf16/fp16 mixed with fp32 (computed in fp32, dst rounded to nearest
//    even). Index tensors are int64 or int32.
//  - src tensors may be strided views, including broadcast views with stride 0 (the front end
//    expands broadcast operands to dst's shape before calling binary()).
//  - Reductions in fp32 accumulate in fp32 (the ref backend in double where noted).
//
// RefBackend implements every kernel with plain loops, templated over float/double: it is the test
// oracle and is never deleted. CpuBackend derives from it and overrides what it accelerates
// (oneDNN for matmul/conv, OpenMP+SIMD loops for the rest); anything it does not handle
// (an odd layout, fp64) falls through to the ref kernel. Tests run each op under both.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "mixp/tensor/tensor.h"

namespace mixp {

// gelu: the tanh approximation; gelu_erf: the exact 0.5 x (1 + erf(x / sqrt 2)) (ops.h,
// GeluApprox).
enum class UnaryOp : uint8_t { neg, exp, log, sqrt, relu, gelu, tanh, sigmoid, sin, cos, gelu_erf };
enum class BinaryOp : uint8_t { add, sub, mul, div };
// add: x + s   mul: x * s   pow: x^s   rsub: s - x   rdiv: s / x
enum class ScalarOp : uint8_t { add, mul, pow, rsub, rdiv };
enum class ReduceOp : uint8_t { sum, mean, max };
// Fused epilogue of matmul/linear. gelu is the tanh approximation (see ops.h).
enum class Activation : uint8_t { none, relu, gelu };

struct MatmulConfig {
  // The dtype products are computed in: fp32, fp64, bf16 or fp16. For bf16/fp16 the operands are
  // in that dtype, products are exact, accumulation is fp32 (double in ref), dst and bias are in
  // that dtype or fp32 (cpu: bf16 on oneDNN, fp16 emulated exactly on the fp32 GEMM).
  // fp8_e4m3 / fp8_e5m2 (only on a backend whose fp8_matmul() is true; mixp::gemm routes the
  // FP8 recipes' codes here, backend/gemm.h): 2-d operands of 8-bit floats, a of that dtype and
  // b E4M3 or E5M2 (not both E5M2), products exact, fp32 accumulation, dst fp32 or bf16; no bias,
  // activation, batch or accumulate (the per-tensor scales, bias and ReLU follow in
  // scale_bias_act). A backend without FP8 units never sees it: gemm() widens the codes to bf16
  // (exact) and runs the bf16 GEMM, so the cpu results stay as they were.
  DType compute = DType::fp32;
  Activation activation = Activation::none;
  bool accumulate = false;  // dst += a @ b (+ bias) instead of dst = ...
  // fp32 GEMM at float32_matmul_precision "high" (ops/matmul_precision.h): the front end has
  // rounded the fp32 operands to tf32 already, so the products are exact either way and a
  // backend with TF32 units may use them (cuda: CUBLAS_COMPUTE_32F_FAST_TF32, docs/cuda.md).
  // The cpu backends compute in fp32 regardless (CPUs have no TF32 units).
  bool tf32 = false;
};

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  DType compute = DType::fp32;  // as MatmulConfig::compute
};

struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};

// The element update of one optimizer step (formulas: optim/adam.h, optim/sgd.h). The scalars are
// computed once per step in double by the optimizer; fp32 updates round them to fp32.
struct UpdateRule {
  enum class Kind : uint8_t { adam, sgd };
  Kind kind = Kind::adam;
  // adam: b1, b2, 1 - b1, 1 - b2, eps, L2 weight decay (0 for AdamW), decoupled decay factor
  //       (1 for Adam), -lr / bias_correction1, sqrt(bias_correction2).
  // sgd:  lr, weight_decay, momentum, 1 - dampening.
  double s[9] = {};
  bool sgd_first = false;  // the first step (the momentum buffer starts as the gradient)
  bool sgd_nesterov = false;
  bool sgd_momentum = false;  // slots[0] is the momentum buffer
  bool sgd_weight_decay = false;
};

// One parameter's optimizer step (optim/optimizer.h describes the precision choices).
struct ParamUpdate {
  // chunked == false: `values` (fp32 or fp64, contiguous: the parameter or its master) and the
  // slots (same dtype) are updated in place with `grad` (same dtype, contiguous); `shadow`, when
  // defined, is rewritten from the new fp32 values (kShadowRound). The caller writes a master back
  // to its parameter.
  // chunked == true: parameters narrower than fp32 without a master, narrow (bf16) states or
  // Kahan compensation: `values` is the parameter (any element-wise float), `master` its fp32
  // master or undefined, `comp` the Kahan buffer or undefined, grad an element-wise float;
  // everything is widened to fp32 in chunks, updated, and rounded back (the parameter with
  // write_back/overflow/seed, stochastic states with one stream per slot).
  bool chunked = false;
  Tensor values, grad, master, comp, shadow;
  std::span<const Tensor> slots;
  Round write_back = Round::nearest_even;
  Overflow overflow = Overflow::ieee;
  uint64_t seed = 0;
  int64_t step = 0;
};

// What lowbit_codes() computes: the low-bit QAT quantizers of quant/lowbit.h (LowBitLayer's
// weights, LowBitActivation's inputs and outputs), values kept as fp32 codes.
struct LowBitCodesSpec {
  enum class Kind : uint8_t {
    // Weights, src [O, K] (O = scales.numel()). Per row o: s = max(max(|min(r, 0)|, max(r, 0)) /
    // ((qmax - qmin) / 2), 2^-23); q = nearest-even(r * (1 / s)); codes = clamp(q, qmin, qmax);
    // mask = qmin <= q <= qmax; scales[o] = s.
    weight_int,
    // Weights: delta = 0.7 * mean |w| (double sum in element order); codes = w > delta ? 1 :
    // w < -delta ? -1 : 0; alpha = max(mean |w| over the nonzero codes (double), 2^-23) (2^-23 if
    // none) in every scales[o]; mask all 1.
    weight_ternary,
    // Weights: codes = w >= 0 ? 1 : -1; mask = |w| <= 1; scales[o] = max(mean |row| (double),
    // 2^-23).
    weight_binary,
    // Activations, any shape: q = nearest-even(src * (1 / scale)); codes = clamp(q, qmin, qmax)
    // (NaN stays NaN); mask = qmin <= q <= qmax. scales unused.
    act_int,
    // Activations: codes = src >= 0 ? 1 : -1; mask = |src| <= 1. scales unused.
    act_sign,
  };
  Kind kind = Kind::act_int;
  float qmin = 0.0f, qmax = 0.0f;  // weight_int, act_int
  float scale = 1.0f;              // act_int (finite, > 0)
};

// What quantize() produces (the "quantize" family: one kernel, the format in the spec).
struct QuantizeSpec {
  enum class Kind : uint8_t {
    // dst (bf16, src's shape) = the values of round_fp8(src * scale) in `format` (fp8_e4m3 or
    // fp8_e5m2: nearest even, saturating, NaN stays NaN; exact in bf16, docs/fp8.md); aux (fp32,
    // one element, or undefined) = max |src| as amax(). On a backend whose fp8_matmul() is true,
    // dst may also be of dtype `format`: the same values as 8-bit codes.
    fp8_tensor,
    // MX block scaling (mixp/format/block_mx.h): src is rows of src.size(-1) values, cut into
    // blocks of `block` along each row (the last one partial), each with an e8m0 shared scale;
    // dst (bf16, src's shape) = the block-dequantized fp8 values, as mx_fake_quantize followed by
    // an fp32 -> bf16 conversion (nearest even). aux unused.
    fp8_mx,
    // Integer fake quantization (quant/fake_quantize.h; PyTorch's rules): src is [outer,
    // channels, inner] with `params` one entry per channel (one entry: per tensor). v = src *
    // inv_scale (fp32), q = nearest-even(v) + zero_point, dst (fp32) = (clamp(q, qmin, qmax) -
    // zero_point) * scale, NaN stays NaN; aux (uint8, src's shape, or undefined) = 1 where
    // qmin <= q <= qmax (the straight-through mask), else 0.
    int_fake,
  };
  struct IntParams {
    float scale, inv_scale, zero_point, qmin, qmax;
  };
  Kind kind = Kind::fp8_tensor;
  DType format = DType::fp8_e4m3;          // fp8_tensor, fp8_mx
  float scale = 1.0f;                      // fp8_tensor (finite, > 0)
  int block = 32;                          // fp8_mx
  // fp8_mx: src is 2-D [R, C] and the blocks run down each column (dim 0: `block` consecutive
  // rows of one column), dst [R, C]: the same values as quantizing the rows of src's transpose,
  // in src's layout (MXFP8's column-wise operands without a transposed copy, amp/fp8_linear.cpp).
  bool along_columns = false;
  std::span<const IntParams> params = {};  // int_fake
  int64_t channels = 1,
          inner = 0;  // int_fake: src is [numel / (channels * inner), channels, inner]
};

// One update of an FP8 delayed-scaling state (amp/fp8_scaling.h, Transformer Engine's rules):
// history fp32 [L], scale and scale_inv fp32 [1], all contiguous.
struct Fp8ScaleUpdate {
  // false: record, history[0] = fmax(history[0], amax) (a NaN amax changes nothing).
  // true: roll, a_i = history[i + 1] for i < L - 1 and a_{L-1} = history[0]; m = max_i a_i
  // (most_recent: m = the old history[0]); history[0] = 0, history[i] = a_i for i > 0; scale =
  // fp8_scale_from_amax(m, fp8_max, margin, scale), scale_inv = 1 / scale (fp32).
  bool roll = false;
  float amax = 0.0f;
  bool most_recent = false;
  float fp8_max = 448.0f;
  int margin = 0;
};

// Transformer Engine's scale for an amax, in fp32: (fp8_max * 2^-margin) / amax, FLT_MAX when
// that overflows, and `previous` when amax is not finite and > 0 (amp::fp8_scale_from_amax).
float fp8_scale_from_amax(float amax, float fp8_max, int margin, float previous);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // --- copies. copy: same shape, any dtypes (nearest-even, IEEE overflow); src may be strided.
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // Element i of dst (row-major) uses sr_bits(seed, i) under Round::stochastic.
  virtual void convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
                       uint64_t seed) = 0;
  virtual void fill(Tensor& dst, double value) = 0;
  // dst += alpha * src (dst any layout, src broadcastable view of dst's shape). For grads.
  virtual void add_inplace(Tensor& dst, const Tensor& src, double alpha) = 0;

  // --- pointwise
  virtual void unary(UnaryOp op, Tensor& dst, const Tensor& src) = 0;
  // dsrc = ddst * op'(src); src or dst may be undefined when op' does not need it:
  // relu/tanh/sigmoid/exp/sqrt read dst, gelu/gelu_erf/log/sin/cos read src, neg reads neither.
  virtual void unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                              const Tensor& dst) = 0;
  virtual void binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) = 0;
  virtual void scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) = 0;
  // Inverted dropout: dst = src * keep / (1 - p), keep = (hash(seed, i) >= p * 2^32) for the
  // row-major index i. Backward is the same kernel on the gradient (no mask is stored).
  virtual void dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) = 0;

  // --- reductions: dst has src's rank, reduced dims have size 1 (keepdim form).
  virtual void reduce(ReduceOp op, Tensor& dst, const Tensor& src) = 0;
  // Gradient of max: ddst is split equally among the elements equal to the max (like torch.amax).
  virtual void reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                   const Tensor& dst) = 0;
  // Index of the maximum along `dim` (torch.argmax): dst int64 of src's shape with dim of size 1.
  // Ties go to the first index; NaN counts as larger than any number (the first NaN wins). src
  // may be any floating or integer dtype, any layout.
  virtual void argmax(Tensor& dst, const Tensor& src, int dim) = 0;

  // --- softmax over `dim` (log: log_softmax)
  virtual void softmax(Tensor& dst, const Tensor& src, int dim, bool log) = 0;
  virtual void softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                                bool log) = 0;

  // --- layer norm over the last `norm_size` elements of each row: src is [rows, norm_size]
  // (any leading shape), mean/rstd are [rows]. weight/bias [norm_size] may be undefined.
  virtual void layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src,
                          const Tensor& weight, const Tensor& bias, double eps) = 0;
  // LayerNorm's 16-bit save (ops/layer_norm_saved.h): dst (bf16 or fp16, src's shape) =
  // (src - mean) * rstd per row in fp32, rounded to nearest-even; src [rows, n] contiguous fp32.
  virtual void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                               const Tensor& rstd) = 0;
  // dweight/dbias may be undefined (not needed); when defined they are overwritten.
  virtual void layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                   const Tensor& src, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd) = 0;
  // LayerNorm's backward from the 16-bit save (ops/layer_norm_saved.h): dsrc, dweight, dbias
  // (either may be undefined; when defined, overwritten) of ddst [rows, n] fp32, xhat [rows, n]
  // bf16 or fp16, weight [n] fp32 or undefined, rstd [rows] fp32, all contiguous. The default runs
  // layer_norm_backward on blocks of rows (xhat widened exactly, mean 0, rstd 1), sums the blocks'
  // dweight/dbias in order and scales each row of dsrc by its rstd (src/backend/backend.cpp); a
  // backend may fuse it into one pass that gives the same bits for the same thread count.
  virtual void layer_norm_backward_xhat(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                        const Tensor& ddst, const Tensor& xhat,
                                        const Tensor& weight, const Tensor& rstd);
  // Rows per block of the default layer_norm_backward_xhat for rows of n elements: about 2^16
  // widened values (256 KiB, in L2), at least one row.
  static int64_t layer_norm_xhat_block(int64_t rows, int64_t n);

  // --- RMSNorm (Zhang & Sennrich 2019; LLaMA's LlamaRMSNorm) over the last n elements of each
  // row: src [rows, n] (any leading shape, contiguous), rstd [rows] = 1 / sqrt(mean(src^2) + eps),
  // dst = src * rstd * weight (weight [n] or undefined). fp32 or fp64 (the compute dtype).
  virtual void rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight,
                        double eps) = 0;
  // dweight may be undefined (not needed); when defined it is overwritten.
  virtual void rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst,
                                 const Tensor& src, const Tensor& weight, const Tensor& rstd) = 0;
  // --- rotary position embedding (Su et al. 2021) in the Hugging Face "rotate_half" layout: src
  // and dst [B, T, H, D] contiguous, cos and sin [T, D / 2] (the angle of position t and pair j);
  // pair j is the elements j and j + D / 2 of each head:
  //   dst[j] = src[j] cos - src[j + D/2] sin,   dst[j + D/2] = src[j + D/2] cos + src[j] sin.
  // inverse rotates by minus the angle (the transpose: rope's backward). src may be dst.
  virtual void rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
                    bool inverse) = 0;

  // --- batch norm over [N, C, *] per channel C. Training: normalize with the batch statistics,
  // save mean/invstd [C], and update running_mean/var (if defined) with momentum and the unbiased
  // variance (PyTorch). Eval: normalize with the running statistics (save_* untouched).
  virtual void batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                          Tensor& running_var, const Tensor& src, const Tensor& weight,
                          const Tensor& bias, bool training, double momentum, double eps) = 0;
  // Training-mode gradient (batch statistics). dweight/dbias may be undefined.
  virtual void batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                   const Tensor& src, const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd) = 0;

  // --- embedding: dst[i, :] = weight[indices[i], :]; backward accumulates into dweight
  // (which the front end zeroes).
  virtual void embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) = 0;
  virtual void embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) = 0;
  // dweight (fp32, contiguous, already holding a gradient) += the embedding's gradient, bit for
  // bit what embedding_backward into a zeroed buffer followed by add_inplace(dweight, that, 1)
  // gives, without the [V, E] buffer: each referenced row's contributions are summed from +0 in
  // index order and then added to the row; every other row gets + 0 (which turns -0 into +0, as
  // the dense add did). The default does exactly that dense sequence (a temporary [V, E] tensor);
  // backends override it to work in place (autograd's in-place leaf accumulation, nn_ops.cpp).
  virtual void embedding_backward_add(Tensor& dweight, const Tensor& ddst, const Tensor& indices);

  // --- 2-D pooling on NCHW. max: ties go to the first maximum in the window (row-major);
  // avg: counts the padding (PyTorch count_include_pad=True).
  virtual void max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) = 0;
  virtual void max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                   const Pool2dParams& p) = 0;
  virtual void avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) = 0;
  virtual void avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) = 0;

  // --- matmul: a [M, K] or [B, M, K], b [K, N] or [B, K, N] (any strides; a batch stride of 0
  // broadcasts), dst [M, N] / [B, M, N] contiguous, bias [N] or undefined.
  virtual void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                      const MatmulConfig& cfg) = 0;
  // Whether matmul takes FP8 operands natively (MatmulConfig::compute fp8_e4m3/fp8_e5m2): cuda on
  // sm_89 and newer (cuBLASLt's FP8 GEMMs). Where it is true, quantize's fp8_tensor also writes
  // the codes as fp8 (QuantizeSpec), so that the FP8 recipes' operands stay 8-bit; where false
  // (cpu, ref, cuda before sm_89) the codes are bf16 values, as they always were there.
  virtual bool fp8_matmul() const { return false; }

  // --- conv2d, NCHW / OIHW, groups 1. bias [O] or undefined.
  virtual void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
                      const Conv2dParams& p) = 0;
  virtual void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                                    const Conv2dParams& p) = 0;
  // dbias may be undefined.
  virtual void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                       const Tensor& src, const Conv2dParams& p) = 0;

  // --- scaled dot-product attention on [B, H, T, D] (q, k, v contiguous; strided views too where
  // attention_strided() says so); lse [B, H, T] (contiguous) is the log-sum-exp of each row of
  // scores (kept for backward instead of the T x T probabilities).
  virtual void attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, bool causal, double scale) = 0;
  virtual void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                  const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& dst, const Tensor& lse, bool causal,
                                  double scale) = 0;
  // Whether attention and attention_backward also take q, k, v, dst, ddst, dq, dk and dv as
  // [B, H, T, D] views with unit stride along D and any other strides: the heads of a
  // transformer's packed qkv GEMM output [B, T, 3C] and of the [B, T, C] tensor its projection
  // reads (ops.h, attention_packed_qkv), read and written in place. False: contiguous only (the
  // op then passes contiguous copies).
  virtual bool attention_strided() const { return false; }

  // --- cross entropy from logits [N, C] and class indices [N]: loss [] = mean_i (lse_i -
  // x_i[t_i]); lse [N] saved for backward.
  virtual void cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                             const Tensor& targets) = 0;
  virtual void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                      const Tensor& targets, const Tensor& lse) = 0;

  // --- the fused classifier (llm.c's fused_classifier; ops.h, cross_entropy_in_place): logits
  // [N, Cp] contiguous, fp32, bf16 or fp16 (a ref kernel also takes fp64), of which only the first
  // `classes` <= Cp columns are classes (GPT-2's vocabulary 50257 padded to 50304 columns); the
  // columns beyond never enter the softmax. Forward: loss [] fp32 = mean_n (lse_n - x_n[t_n]) and
  // lse [N] fp32 over the first `classes` columns, computed in fp32 from the exactly widened
  // logits (fp64 in, fp64 out), targets int64/int32 in [0, classes) (std::out_of_range otherwise).
  // The numbers are those of cross_entropy() on the logits' first `classes` columns: the same
  // row kernels over the same values, bit for bit on the cpu backend.
  virtual void cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                                      const Tensor& targets, int64_t classes) = 0;
  // Backward, in place: `dlogits` holds the logits on entry (as the forward saw them) and their
  // gradient on return, dloss[0] / N * (softmax_n - onehot(t_n)) over the first `classes` columns
  // and exactly 0 beyond, computed in fp32 (fp64 for fp64) as cross_entropy_backward computes it
  // and rounded once to dlogits' dtype (nearest-even). dloss: fp32 (or fp64) scalar; lse from the
  // forward. No other buffer of the size of dlogits is allocated (that is the point: the
  // classifier's logits and their gradient share one buffer at the step's memory peak).
  virtual void cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss,
                                               const Tensor& targets, const Tensor& lse,
                                               int64_t classes) = 0;

  // --- training-step kernels (optim, amp)
  // grad (contiguous) *= inv_scale in place (untouched when inv_scale is 1): fp32/fp64 directly,
  // other element-wise floats widened to fp32 and rounded back to nearest-even. found_inf (fp32,
  // one element) is set to 1 when an element of grad was inf or NaN before the multiply, and
  // left alone otherwise (torch._amp_foreach_non_finite_check_and_unscale_).
  virtual void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) = 0;
  // dst (fp64, one element) = the sum of the squares of src (fp32 or fp64, contiguous) in fp64.
  virtual void sum_squares(Tensor& dst, const Tensor& src) = 0;
  // One parameter's optimizer step (ParamUpdate above).
  virtual void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) = 0;

  // --- scaling, quantization and statistics (amp's FP8/MX recipes, quant's QAT, inspect, the
  // binary cross entropy). Inputs are contiguous unless said otherwise.
  // dst (fp32, one element) = max |src| over src (fp32); NaN is ignored, inf counts (TE's amax);
  // 0 for an empty src.
  virtual void amax(Tensor& dst, const Tensor& src) = 0;
  // Per-channel min and max of src (fp32) seen as [outer, channels, inner]: min and max fp32
  // [channels]; both NaN for a channel holding a NaN or +-inf; +inf and -inf for an empty one.
  virtual void minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
                      int64_t inner) = 0;
  // The quantize family (QuantizeSpec above); src fp32.
  virtual void quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) = 0;
  // The gradient through a mask, elementwise, all contiguous of one shape, ddst and dsrc fp32.
  // mask uint8 (quantize's straight-through mask): dsrc = ddst * mask (PyTorch's STE, so an inf
  // or NaN ddst gives NaN and a negative one -0 where the mask is 0). mask fp32 (a ReLU's saved
  // output): dsrc = mask > 0 ? ddst : 0.
  virtual void mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) = 0;
  // The low-bit QAT codes (LowBitCodesSpec above): src, codes fp32 of one shape; scales fp32
  // [O] for the weight kinds; mask uint8 of src's shape, or undefined (not needed). Bit for bit
  // the loops of lowbit_weight_codes_raw (quant/lowbit.h) and lowbit_act_codes.
  virtual void lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales,
                            Tensor& mask, const Tensor& src) = 0;
  // Their straight-through gradient, elementwise on [outer, channels, inner] (all fp32 but mask,
  // uint8; contiguous, one shape): dsrc = mask ? ddst * inv_scales[c] : +0, inv_scales fp32
  // [channels] (1 / the weight row's scale, or one 1 / scale for activations).
  virtual void lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                                     const Tensor& inv_scales, int64_t inner) = 0;
  // dst = act(src * alpha + bias) on [rows, n] fp32 (bias fp32 [n] or undefined; act none or
  // relu, relu(NaN) = 0); dst may be src. With a bias the cpu backend's AVX2/AVX-512 tiers compute
  // fma(src, alpha, bias) (one rounding), its baseline tier two roundings; the ref backend the fma.
  // The fp8 GEMMs' epilogue (the scales of both operands in alpha).
  virtual void scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                              Activation act) = 0;
  // The FP8 delayed-scaling state update (Fp8ScaleUpdate above).
  virtual void fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv,
                                const Fp8ScaleUpdate& u) = 0;
  // dst (int64 [2]) = {number of NaN, number of +-inf} in src (fp32, fp64, bf16 or fp16; any
  // layout).
  virtual void count_nonfinite(Tensor& dst, const Tensor& src) = 0;
  // Binary cross entropy, mean over all n elements (ops.h): x, target, dx and dtarget in the
  // compute dtype (fp32 or fp64), contiguous, same shape; loss [] (that dtype) summed in double in
  // element order, NaN when n is 0. On probabilities: -(t log p + (1 - t) log(1 - p)) with each log
  // clamped at -100 (PyTorch); on logits (`logits`): max(x, 0) - x t + log1p(exp(-|x|)).
  // Backward, with s = dloss[0] / n in double: dx = s (p - t) / max(p (1 - p), 1e-12) or
  // s (sigmoid(x) - t); dtarget = s (log(1 - p) - log p) (clamped logs) or -s x. dx or dtarget may
  // be undefined (not needed).
  virtual void binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target,
                                    bool logits) = 0;
  virtual void binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss,
                                             const Tensor& x, const Tensor& target,
                                             bool logits) = 0;
};

enum class BackendKind : uint8_t { ref, cpu };

// The backend of the host (cpu device) on this thread: the innermost BackendGuard, else the
// process default (cpu unless set_default_backend or MIXP_BACKEND=ref says otherwise).
Backend& backend();

// The backend that computes on `device`: cpu -> backend(); guarded -> the guarded test backend
// (each call forwards to backend() inside a DeviceAccessScope, tensor/device.h); a device with
// no backend built throws.
Backend& backend_for(Device device);
// The one device of these tensors (undefined ones are skipped; none defined: default_device()).
// Tensors on different devices throw, naming both.
Device common_device(std::initializer_list<const Tensor*> tensors);
Device common_device(std::span<const Tensor> tensors);
// Ops dispatch here: the backend of their tensors' device.
template <class... Ts>
Backend& backend_for(const Ts&... tensors) {
  return backend_for(common_device({&tensors...}));
}
Backend& get_backend(BackendKind kind);
BackendKind current_backend_kind();
void set_default_backend(BackendKind kind);
const char* to_string(BackendKind kind);

// Runs ops on `kind` in this thread for the guard's lifetime (tests compare ref and cpu this way).
class BackendGuard {
 public:
  explicit BackendGuard(BackendKind kind);
  ~BackendGuard();
  BackendGuard(const BackendGuard&) = delete;
  BackendGuard& operator=(const BackendGuard&) = delete;

 private:
  int prev_;
};

// Threads used by OpenMP loops and oneDNN (oneDNN runs on the same OpenMP runtime).
void set_num_threads(int n);
int get_num_threads();

}  // namespace mixp
