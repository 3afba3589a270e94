// The CPU backend (internal header): oneDNN for matmul and conv2d (primitives cached per shape),
// OpenMP loops the compiler vectorizes for pointwise ops, reductions, softmax and norms. Every
// kernel falls back to RefBackend for what it does not specialize (fp64, odd strides).
#pragma once
#include "backend/ref/ref_backend.h"

namespace mixp {

class CpuBackend : public RefBackend {
 public:
  const char* name() const override { return "cpu"; }
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
  void reduce_narrow_sum(ReduceOp op, Tensor& dst, const Tensor& src);
  void reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Tensor& dst) override;
  void argmax(Tensor& dst, const Tensor& src, int dim) override;
  void softmax(Tensor& dst, const Tensor& src, int dim, bool log) override;
  void softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                        bool log) override;
  void layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  void layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd) override;
  void rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight,
                double eps) override;
  void rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst, const Tensor& src,
                         const Tensor& weight, const Tensor& rstd) override;
  void rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
            bool inverse) override;
  void batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                  Tensor& running_var, const Tensor& src, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps) override;
  void batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& save_mean,
                           const Tensor& save_invstd) override;
  void embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) override;
  void embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override;
  void embedding_backward_add(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override;
  void max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override;
  void max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Pool2dParams& p) override;
  void avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override;
  void avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) override;
  void cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                     const Tensor& targets) override;
  void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse) override;
  void cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                              const Tensor& targets, int64_t classes) override;
  void cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& targets,
                                       const Tensor& lse, int64_t classes) override;
  void attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                 bool causal, double scale) override;
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& dst, const Tensor& lse,
                          bool causal, double scale) override;
  // [B, H, T, D] views with unit stride along D (cpu_attention.cpp): the GEMMs read and write
  // them in place.
  bool attention_strided() const override { return true; }
  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
              const MatmulConfig& cfg) override;
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& p) override;
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                            const Conv2dParams& p) override;
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                               const Tensor& src, const Conv2dParams& p) override;
  // The training-step kernels (step_*.cpp: the tiered loops of step_kernels.h).
  void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) override;
  void sum_squares(Tensor& dst, const Tensor& src) override;
  void layer_norm_backward_xhat(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                const Tensor& xhat, const Tensor& weight,
                                const Tensor& rstd) override;
  void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                       const Tensor& rstd) override;
  void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) override;
  // Scaling and quantization (cpu_quantize.cpp), split over the OpenMP threads. The FP8/MX
  // kernels of fp8_kernels.h:
  void quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) override;
  void amax(Tensor& dst, const Tensor& src) override;
  void scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                      Activation act) override;
  // The QAT kernels of qkernels.h (quantize's int_fake above, its mask's gradient, observers):
  void mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) override;
  void lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales, Tensor& mask,
                    const Tensor& src) override;
  void lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                             const Tensor& inv_scales, int64_t inner) override;
  void minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
              int64_t inner) override;
};

}  // namespace mixp
