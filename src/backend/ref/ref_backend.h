// The scalar reference backend (internal header): every kernel of backend.h with plain loops over
// arbitrary strides, templated over float/double, accumulating in double. It is the oracle the
// tests compare the cpu backend against, and the fallback of CpuBackend for layouts it does not
// specialize. Obviously correct beats fast here.
#pragma once
#include <cstdint>

#include "mixp/backend/backend.h"

namespace mixp {

// How many RefBackend kernels have run in this process (every RefBackend method counts itself on
// entry; ref_kernel_count.cpp). The cpu-vs-ref tests read it around the cpu run: a CpuBackend op
// that silently falls back to (or never overrides) the reference kernel would otherwise compare
// the oracle with itself and pass whatever the cpu kernel does (tests/ops/op_test_util.h).
uint64_t ref_kernel_calls();
const char* last_ref_kernel();  // the name of the RefBackend method that counted itself last
void count_ref_kernel(const char* name);

class RefBackend : public Backend {
 public:
  const char* name() const override { return "ref"; }
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

  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
              const MatmulConfig& cfg) override;
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& p) override;
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                            const Conv2dParams& p) override;
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                               const Tensor& src, const Conv2dParams& p) override;
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
  // The training-step kernels (ref_step.cpp).
  void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) override;
  void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                       const Tensor& rstd) override;
  void sum_squares(Tensor& dst, const Tensor& src) override;
  void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) override;
  // Scaling, quantization and statistics: scalar loops over the format's reference codecs
  // (ref_quantize.cpp); the binary cross entropy, FP8 scale update and non-finite count are the
  // only implementation (the cpu backend inherits them: ref_bce.cpp, ref_stats.cpp).
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
};

}  // namespace mixp
