// Internal: the base of the CUDA backend. Every kernel of the Backend interface
// (backend/backend.h) throws "not implemented on cuda: <op>" here, in one place; CudaBackend
// (cuda_backend.h) overrides the kernels it has. A kernel added to the interface later starts
// out as one more line here (docs/cuda.md lists what is not implemented).
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::cuda {

// Throws std::runtime_error("mixp: <op> is not implemented on cuda yet; ...").
[[noreturn]] void not_implemented(const char* op);

class CudaBackendBase : public Backend {
 public:
  void copy(Tensor& dst, const Tensor& src) override {
    not_implemented("copy");
  }
  void convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow, uint64_t seed) override {
    not_implemented("convert");
  }
  void fill(Tensor& dst, double value) override {
    not_implemented("fill");
  }
  void add_inplace(Tensor& dst, const Tensor& src, double alpha) override {
    not_implemented("add_inplace");
  }
  void unary(UnaryOp op, Tensor& dst, const Tensor& src) override {
    not_implemented("unary");
  }
  void unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src, const Tensor& dst) override {
    not_implemented("unary_backward");
  }
  void binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) override {
    not_implemented("binary");
  }
  void scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) override {
    not_implemented("scalar");
  }
  void dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) override {
    not_implemented("dropout");
  }
  void reduce(ReduceOp op, Tensor& dst, const Tensor& src) override {
    not_implemented("reduce");
  }
  void reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src, const Tensor& dst) override {
    not_implemented("reduce_max_backward");
  }
  void argmax(Tensor& dst, const Tensor& src, int dim) override {
    not_implemented("argmax");
  }
  void softmax(Tensor& dst, const Tensor& src, int dim, bool log) override {
    not_implemented("softmax");
  }
  void softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim, bool log) override {
    not_implemented("softmax_backward");
  }
  void rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight, double eps) override {
    not_implemented("rms_norm");
  }
  void rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst, const Tensor& src, const Tensor& weight, const Tensor& rstd) override {
    not_implemented("rms_norm_backward");
  }
  void rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin, bool inverse) override {
    not_implemented("rope");
  }
  void layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src, const Tensor& weight, const Tensor& bias, double eps) override {
    not_implemented("layer_norm");
  }
  void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean, const Tensor& rstd) override {
    not_implemented("layer_norm_xhat");
  }
  void layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst, const Tensor& src, const Tensor& weight, const Tensor& mean, const Tensor& rstd) override {
    not_implemented("layer_norm_backward");
  }
  void batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var, const Tensor& src, const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps) override {
    not_implemented("batch_norm");
  }
  void batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst, const Tensor& src, const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd) override {
    not_implemented("batch_norm_backward");
  }
  void embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) override {
    not_implemented("embedding");
  }
  void embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override {
    not_implemented("embedding_backward");
  }
  void max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override {
    not_implemented("max_pool2d");
  }
  void max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src, const Pool2dParams& p) override {
    not_implemented("max_pool2d_backward");
  }
  void avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override {
    not_implemented("avg_pool2d");
  }
  void avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) override {
    not_implemented("avg_pool2d_backward");
  }
  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulConfig& cfg) override {
    not_implemented("matmul");
  }
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) override {
    not_implemented("conv2d");
  }
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight, const Conv2dParams& p) override {
    not_implemented("conv2d_backward_data");
  }
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst, const Tensor& src, const Conv2dParams& p) override {
    not_implemented("conv2d_backward_weights");
  }
  void attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) override {
    not_implemented("attention");
  }
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dst, const Tensor& lse, bool causal, double scale) override {
    not_implemented("attention_backward");
  }
  void cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) override {
    not_implemented("cross_entropy");
  }
  void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse) override {
    not_implemented("cross_entropy_backward");
  }
  void cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets, int64_t classes) override {
    not_implemented("cross_entropy_in_place");
  }
  void cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& targets, const Tensor& lse, int64_t classes) override {
    not_implemented("cross_entropy_in_place_backward");
  }
  void amax(Tensor& dst, const Tensor& src) override {
    not_implemented("amax");
  }
  void minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels, int64_t inner) override {
    not_implemented("minmax");
  }
  void quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) override {
    not_implemented("quantize");
  }
  void lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales, Tensor& mask,
                    const Tensor& src) override {
    not_implemented("lowbit_codes");
  }
  void lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                             const Tensor& inv_scales, int64_t inner) override {
    not_implemented("lowbit_codes_backward");
  }
  void mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) override {
    not_implemented("mask_grad");
  }
  void scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha, Activation act) override {
    not_implemented("scale_bias_act");
  }
  void fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv, const Fp8ScaleUpdate& u) override {
    not_implemented("fp8_scale_update");
  }
  void count_nonfinite(Tensor& dst, const Tensor& src) override {
    not_implemented("count_nonfinite");
  }
  void binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target, bool logits) override {
    not_implemented("binary_cross_entropy");
  }
  void binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss, const Tensor& x, const Tensor& target, bool logits) override {
    not_implemented("binary_cross_entropy_backward");
  }
  void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) override {
    not_implemented("unscale_check");
  }
  void sum_squares(Tensor& dst, const Tensor& src) override {
    not_implemented("sum_squares");
  }
  void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) override {
    not_implemented("optimizer_update");
  }
};

}  // namespace mixp::cuda
