// Internal: CudaBackend, the Backend of the cuda devices (one instance per device). It overrides
// the kernels it implements; the rest throw from CudaBackendBase (cuda_backend_base.h).
// The kernels themselves are in cuda_pointwise.cu, cuda_rows.cu, cuda_step.cu (launchers in
// cuda_kernels.h) and cuda_gemm.cpp (cuBLASLt); this class checks dtypes and layouts, turns
// Tensors into the launchers' descriptors, and checks each launch.
#pragma once
#include <string>

#include "backend/cuda/cuda_backend_base.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"

namespace mixp::cuda {

// A tensor's device pointer, read inside a DeviceAccessScope (tensor/device.h): outside one,
// data_ptr() of a cuda tensor throws, so that host code without a cuda kernel fails clearly
// instead of crashing on device memory.
inline void* dev_ptr(const Tensor& t) {
  const DeviceAccessScope in_kernel;
  return t.data_ptr();
}

// Throws std::runtime_error("mixp: <op> on cuda: <what> is not implemented on cuda yet
// (docs/cuda.md)"): one message for every kernel that refuses a dtype, layout or option.
[[noreturn]] void unsupported(const char* op, const std::string& what);

// The Elem of a dtype; fp64 and block formats throw not_implemented (only fp32/16-bit/fp8
// compute is built on cuda).
Elem elem_of(DType t, const char* op);
View view_of(const Tensor& t, const char* op);
Shape8 shape_of(const Shape& s, const char* op);

class CudaBackend final : public CudaBackendBase {
 public:
  explicit CudaBackend(int index) : index_(index) {}
  const char* name() const override { return "cuda"; }

  void copy(Tensor& dst, const Tensor& src) override;
  void convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
               uint64_t seed) override;
  void fill(Tensor& dst, double value) override;
  void add_inplace(Tensor& dst, const Tensor& src, double alpha) override;
  void unary(UnaryOp op, Tensor& dst, const Tensor& src) override;
  void unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                      const Tensor& dst) override;
  void binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) override;
  void scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) override;
  void dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) override;
  void reduce(ReduceOp op, Tensor& dst, const Tensor& src) override;
  void argmax(Tensor& dst, const Tensor& src, int dim) override;
  void softmax(Tensor& dst, const Tensor& src, int dim, bool log) override;
  void softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                        bool log) override;
  void layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                       const Tensor& rstd) override;
  void layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd) override;
  void embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) override;
  void embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override;
  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
              const MatmulConfig& cfg) override;
  bool fp8_matmul() const override;
  void attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                 bool causal, double scale) override;
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& dst, const Tensor& lse,
                          bool causal, double scale) override;
  void cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                     const Tensor& targets) override;
  void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse) override;
  void cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                              const Tensor& targets, int64_t classes) override;
  void cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& targets,
                                       const Tensor& lse, int64_t classes) override;
  void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) override;
  void sum_squares(Tensor& dst, const Tensor& src) override;
  void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) override;
  // cuda_backend_nn.cpp (kernels: cuda_nn.cu, rules: math/nn_math.h; GEMMs: cuBLASLt).
  void reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Tensor& dst) override;
  void batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                  Tensor& running_var, const Tensor& src, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps) override;
  void batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& save_mean,
                           const Tensor& save_invstd) override;
  void max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override;
  void max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Pool2dParams& p) override;
  void avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override;
  void avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) override;
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& p) override;
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                            const Conv2dParams& p) override;
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                               const Tensor& src, const Conv2dParams& p) override;
  // cuda_backend_quant.cpp (kernels: cuda_quant.cu, rules: math/quant_math.h).
  void amax(Tensor& dst, const Tensor& src) override;
  void minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
              int64_t inner) override;
  void quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) override;
  void mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) override;
  void lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales, Tensor& mask,
                    const Tensor& src) override;
  void lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                             const Tensor& inv_scales, int64_t inner) override;
  void scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                      Activation act) override;
  void fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv,
                        const Fp8ScaleUpdate& u) override;
  void count_nonfinite(Tensor& dst, const Tensor& src) override;
  void binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target,
                            bool logits) override;
  void binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss,
                                     const Tensor& x, const Tensor& target, bool logits) override;

 private:
  DeviceContext& ctx() { return context(index_); }
  void pointwise(PointwiseArgs& a, const Tensor& dst);
  int index_;
};

// cuda_gemm.cpp: dst = act(a @ b + bias) (or += without act) through cuBLASLt.
void gemm_lt(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
             const MatmulConfig& cfg);
// Whether ctx's device runs FP8 GEMMs natively (compute capability >= 8.9).
bool fp8_gemm_native(const DeviceContext& ctx);
// dst [M, N] (fp32 or bf16, contiguous) = scale_a[0] * scale_b[0] * (a [M, K] @ b [K, N]) for
// fp8 a, b (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3; any 2-d layout, copied into cuBLASLt's TN
// where needed); the scales are fp32 device scalars, both null for 1. cuBLASLt's FP8 kernels
// when the device has them and K and the leading dimensions are multiples of 16 (returns true),
// else the bf16 GEMM on the exactly widened values (false). The one FP8 GEMM of the backend:
// cuda_fp8_matmul (mixp/backend/cuda_gemm.h) and CudaBackend::matmul with an fp8 compute (the
// FP8 recipes, through mixp::gemm) both call it.
bool fp8_gemm(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b,
              const float* scale_a, const float* scale_b, bool fast_accum);

}  // namespace mixp::cuda
