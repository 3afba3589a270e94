// Op front ends: free functions that check their arguments, apply the autocast hook, dispatch to
// the active backend (backend/backend.h) and record a backward node keeping only what backward
// needs. Shape mismatches throw std::invalid_argument naming the op and both shapes.
//
// Dtypes. The result of a floating op has the promoted dtype of its floating inputs (equal dtypes
// stay; any fp64 gives fp64; other mixes give fp32; integer/bool inputs count as fp32; this
// differs from PyTorch for 0-dim and integer tensors: docs/amp.md, "Type promotion"). The op
// computes in fp64 when the result is fp64, else in fp32 (inputs are widened exactly, the result
// is rounded to its dtype with nearest-even). Gradients flow back in each input's dtype; leaves
// narrower than fp32 accumulate .grad in fp32 (autograd/node.h).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mixp/autograd/op_list.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/generator.h"
#include "mixp/tensor/tensor.h"

namespace mixp {

// ---- The autocast hook (docs/architecture.md 3.6, amp). Every op front end calls
// apply_cast_policy(op, inputs) before it looks at dtypes; the hook may replace entries of
// `inputs` by converted tensors (differentiably, e.g. with Tensor::to). With no hook installed
// (today) it does nothing. The amp module installs its policy table with set_cast_policy_hook.
using CastPolicyHook = void (*)(OpId op, std::span<Tensor> inputs);
void set_cast_policy_hook(CastPolicyHook hook);  // nullptr uninstalls
CastPolicyHook cast_policy_hook();
inline void apply_cast_policy(OpId op, std::span<Tensor> inputs) {
  if (CastPolicyHook h = cast_policy_hook()) h(op, inputs);
}

// ---- What an op keeps for backward. An op that computes in fp32 under autocast (layer_norm)
// asks which dtype to keep its saved activation in: the hook answers the autocast dtype when the
// region asks for 16-bit saves (amp::AutocastOptions::low_precision_norm_saves), else fp32.
// No hook, or the hook suspended (backward), means fp32.
using SaveDtypeHook = DType (*)(OpId op);
void set_save_dtype_hook(SaveDtypeHook hook);  // nullptr uninstalls
DType saved_activation_dtype(OpId op);

// ---- Strict dtypes (opt-in). By default a GEMM-kind op (matmul, bmm, linear, conv2d,
// scaled_dot_product_attention) given floating inputs of different dtypes promotes them ("Dtypes"
// above): a bf16 batch fed to an fp32 model outside autocast runs in fp32. PyTorch raises instead
// ("mat1 and mat2 must have the same dtype"), which catches a forgotten autocast region or a
// forgotten cast. With strict dtypes on, mixp raises std::invalid_argument there too. Off by
// default because mixp's own recipes rely on the promotion (per-layer precision mixes dtypes at
// layer boundaries; docs/custom-models.md, "Strict dtypes"). Process-wide; StrictDtypesGuard
// overrides it on this thread for its lifetime.
void set_strict_dtypes(bool on);
bool strict_dtypes();  // this thread's setting (the guard's, else the process-wide one)
class StrictDtypesGuard {
 public:
  explicit StrictDtypesGuard(bool on);
  ~StrictDtypesGuard();
  StrictDtypesGuard(const StrictDtypesGuard&) = delete;
  StrictDtypesGuard& operator=(const StrictDtypesGuard&) = delete;

 private:
  int prev_;
};

// ---- pointwise, broadcasting (NumPy rules)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor relu(const Tensor& a);
// GELU, as torch.nn.functional.gelu(x, approximate=...):
//   GeluApprox::none (the default, as PyTorch's): exact, 0.5 x (1 + erf(x / sqrt 2));
//   GeluApprox::tanh (GPT-2, llm.c): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// mixp's built-in models (the GPT MLP, Linear's Activation::gelu epilogue) use the tanh form.
enum class GeluApprox : uint8_t { none, tanh };
Tensor gelu(const Tensor& a);  // exact (GeluApprox::none)
Tensor gelu(const Tensor& a, GeluApprox approximate);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
// Inverted dropout with probability p of zeroing. Identity when !training or p == 0. The mask is
// a pure function of (seed, element index), so it is never stored: backward regenerates it.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed);

// ---- matmul family (oneDNN on the cpu backend)
// a [..., M, K] @ b [K, N] (b shared by every leading index) or a [B, M, K] @ b [B, K, N]
// or a [M, K] @ b [K, N].
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, M, K] @ [B, K, N]
// y = act(x @ w^T + b): x [..., in], w [out, in], b [out] or undefined. relu is fused into the
// GEMM (oneDNN post-op); gelu is fused when nothing records a gradient.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              Activation act = Activation::none);
// x [N, C, H, W], w [O, C, KH, KW], b [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int64_t stride = 1,
              int64_t padding = 0);
// x [N, C, L], w [O, C, K], b [O] or undefined -> [N, O, (L + 2 padding - dilation (K - 1) - 1) /
// stride + 1] (torch.nn.functional.conv1d, groups 1). Runs as conv2d on the views [N, C, 1, L]
// and [O, C, 1, K], so it has conv2d's kernels (oneDNN), autocast policy and backward.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1);
// softmax(q k^T * scale (+ causal mask)) v on q, k, v [B, H, T, D]; scale defaults to 1/sqrt(D).
// Fused: keeps only the per-row log-sum-exp, never the T x T probabilities, for backward.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, double scale = 0.0);
// Multi-head attention straight from a transformer's packed qkv projection [B, T, 3C] (q, k, v
// the three C-wide column blocks, each of `heads` heads of D = C / heads consecutive columns),
// returning [B, T, C] with the heads side by side, the layout the output projection reads: equal
// to splitting qkv into [B, H, T, D] heads, scaled_dot_product_attention and merging the heads
// back, bit for bit, without the copies of the split and the merge (and in backward, with the
// gradient of q, k and v written into one [B, T, 3C] tensor). Where the backend computes on
// strided heads (Backend::attention_strided) nothing is copied; elsewhere the op copies as the
// split and merge would.
Tensor attention_packed_qkv(const Tensor& qkv, int64_t heads, bool causal = true,
                            double scale = 0.0);
// Rotary position embedding (RoPE; Su et al. 2021) of x [B, T, H, D] (D even) at positions
// 0..T-1, in Hugging Face's rotate_half layout (pair j = elements j and j + D/2 of a head):
// x * cos + rotate_half(x) * sin with cos/sin [>= T, D/2] the angles' tables (the first T rows
// are used; nn/rotary.h builds them from theta and the rope_scaling of a config.json). Computes in
// fp32 (fp64 for fp64 x) and returns x's dtype; differentiable in x only (the tables are
// constants). The backward is the inverse rotation.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
// One LSTM step (PyTorch LSTMCell, gate order i, f, g, o): x [N, I], h/c [N, H],
// w_ih [4H, I], w_hh [4H, H], b_ih/b_hh [4H] or undefined. Returns (h', c').
std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c,
                                    const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                    const Tensor& b_hh);

// ---- softmax and normalization
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalizes over the trailing dims `normalized_shape`; weight/bias have that shape or are
// undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// RMSNorm over the last dim (torch.nn.functional.rms_norm, HF's LlamaRMSNorm): x * w /
// sqrt(mean(x^2) + eps); weight [x.size(-1)] or undefined. fp32 under autocast, as layer_norm.
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);
// x [N, C] or [N, C, *]. Training: batch statistics, running stats updated in place (momentum
// 0.1 and unbiased variance, as PyTorch); eval: running statistics. running_* may be undefined
// in training (no tracking). weight/bias [C] or undefined.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

// ---- reductions (dims may be negative; empty dims = all)
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, const Shape& dims, bool keepdim = false);
// Index of the maximum along dim (torch.argmax), int64, not differentiable. Ties go to the first
// index; NaN counts as the maximum (the first NaN's index). Any floating or integer dtype (int64
// values beyond 2^53 compare exactly on the cpu backend only). The one-argument form indexes the
// flattened tensor and returns a 0-dim tensor. An empty dim throws.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);
// Sums x over its broadcast dims down to `shape` (the gradient of an expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- losses (mean over the batch)
// logits [N, C], targets [N] int64/int32 class indices in [0, C).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
// The fused classifier (llm.c's): cross_entropy over the first `classes` columns of logits
// [N, Cp] (the rest, e.g. GPT-2's vocabulary padding 50257..50303, never enters the softmax and
// gets a zero gradient), with the gradient written over the logits' buffer in backward, so the
// logits and their gradient are one tensor. The loss is fp32 (fp64 for fp64 logits), computed
// from the exactly widened logits by the same kernels as cross_entropy: the loss and gradient are
// bit for bit those of cross_entropy(logits.slice(1, 0, classes)) followed by the cast back to the
// logits' dtype (bf16, fp16) and the slice's zero padding. Logits: contiguous fp32, bf16, fp16 or
// fp64, an intermediate result nothing else reads after backward (a head's output): the buffer
// is reused only when no other tensor shares it at that point, else the gradient is a new
// tensor. Under autocast it reads 16-bit logits as they are (no fp32 copy; amp/cast_policy.h).
Tensor cross_entropy_in_place(const Tensor& logits, const Tensor& targets, int64_t classes);
Tensor mse_loss(const Tensor& pred, const Tensor& target);
// Binary cross entropy of probabilities p in [0, 1] against targets t of the same shape (mean):
// -(t log p + (1 - t) log(1 - p)), each log clamped at -100 (PyTorch). Banned under fp16 autocast
// (amp/cast_policy.h): a sigmoid followed by this loss is binary_cross_entropy_with_logits.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target);
// The stable fusion of sigmoid and BCE (mean): max(x, 0) - x t + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target);

// ---- pooling and embedding
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0,
                  int64_t padding = 0);  // stride 0 = kernel
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
// weight [V, E], indices int64/int32 of any shape -> [*indices.shape, E].
Tensor embedding(const Tensor& indices, const Tensor& weight);

// ---- layout (views where possible; see Tensor for the methods)
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
Tensor cat(std::span<const Tensor> xs, int64_t dim);
Tensor cat(std::initializer_list<Tensor> xs, int64_t dim);
Tensor stack(std::span<const Tensor> xs, int64_t dim);
Tensor stack(std::initializer_list<Tensor> xs, int64_t dim);
// Splits dim into `chunks` equal views (size must divide).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

}  // namespace mixp
