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

#include "mixp/backend/kernel_table.h"
#include "mixp/backend/op_codes.h"  // UnaryOp, BinaryOp, ScalarOp, ReduceOp
#include "mixp/tensor/tensor.h"

namespace mixp {

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

// How ParamUpdate::shadow is rounded from the new fp32 values: exactly as autocast casts
// (amp::kAutocastRound, amp/autocast.h), so a rewritten weight shadow is a fresh cast bit for bit.
inline constexpr Round kShadowRound = Round::nearest_even;
inline constexpr Overflow kShadowOverflow = Overflow::ieee;

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
  // Where `values` starts in the elements of the stream `seed` draws (a ZeRO 3 shard's rows of a
  // parameter, optim/optimizer.h set_write_back_streams): element e rounds with draw offset + e.
  uint64_t offset = 0;
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

// Every kernel is a row of the kernel table (mixp/backend/kernels.def), where its contract is
// documented; the methods below are expanded from it.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  virtual void name params MIXP_KT_PURE_SPEC(kind);
#define MIXP_KERNEL_QUERY(name) \
  virtual bool name() const { return false; }
#include "mixp/backend/kernels.def"

  // Rows per block of the default layer_norm_backward_xhat for rows of n elements: about 2^16
  // widened values (256 KiB, in L2), at least one row.
  static int64_t layer_norm_xhat_block(int64_t rows, int64_t n);
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
