// GuardedBackend: the backend of the guarded test device (tensor/device.h). Its memory is host
// memory that only a backend call may touch: every method opens a DeviceAccessScope and forwards
// to the host backend of this thread (backend(): cpu or ref, observed when an observer is on), so
// results are bit-identical to the cpu device while any computation outside a backend call fails
// at its data_ptr(). tests/engine/test_guarded_device.cpp trains on it.
#include "backend/guarded_backend.h"

namespace mixp::detail {
namespace {

class GuardedBackend final : public Backend {
 public:
  const char* name() const override { return "guarded"; }

  // Runs one kernel of the host backend with the guarded memory open to it.
  template <class F>
  static void run(F&& kernel) {
    const DeviceAccessScope in_kernel;
    kernel(backend());
  }

  void copy(Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.copy(dst, src); });
  }
  void convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
               uint64_t seed) override {
    run([&](Backend& be) { be.convert(dst, src, round, overflow, seed); });
  }
  void fill(Tensor& dst, double value) override {
    run([&](Backend& be) { be.fill(dst, value); });
  }
  void add_inplace(Tensor& dst, const Tensor& src, double alpha) override {
    run([&](Backend& be) { be.add_inplace(dst, src, alpha); });
  }
  void unary(UnaryOp op, Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.unary(op, dst, src); });
  }
  void unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                      const Tensor& dst) override {
    run([&](Backend& be) { be.unary_backward(op, dsrc, ddst, src, dst); });
  }
  void binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) override {
    run([&](Backend& be) { be.binary(op, dst, a, b); });
  }
  void scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) override {
    run([&](Backend& be) { be.scalar(op, dst, src, s); });
  }
  void dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) override {
    run([&](Backend& be) { be.dropout(dst, src, p, seed); });
  }
  void reduce(ReduceOp op, Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.reduce(op, dst, src); });
  }
  void reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Tensor& dst) override {
    run([&](Backend& be) { be.reduce_max_backward(dsrc, ddst, src, dst); });
  }
  void argmax(Tensor& dst, const Tensor& src, int dim) override {
    run([&](Backend& be) { be.argmax(dst, src, dim); });
  }
  void softmax(Tensor& dst, const Tensor& src, int dim, bool log) override {
    run([&](Backend& be) { be.softmax(dst, src, dim, log); });
  }
  void softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                        bool log) override {
    run([&](Backend& be) { be.softmax_backward(dsrc, ddst, dst, dim, log); });
  }
  void rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight,
                double eps) override {
    run([&](Backend& be) { be.rms_norm(dst, rstd, src, weight, eps); });
  }
  void rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst, const Tensor& src,
                         const Tensor& weight, const Tensor& rstd) override {
    run([&](Backend& be) { be.rms_norm_backward(dsrc, dweight, ddst, src, weight, rstd); });
  }
  void rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
            bool inverse) override {
    run([&](Backend& be) { be.rope(dst, src, cos, sin, inverse); });
  }
  void layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src, const Tensor& weight,
                  const Tensor& bias, double eps) override {
    run([&](Backend& be) { be.layer_norm(dst, mean, rstd, src, weight, bias, eps); });
  }
  void layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd) override {
    run([&](Backend& be) {
      be.layer_norm_backward(dsrc, dweight, dbias, ddst, src, weight, mean, rstd);
    });
  }  void layer_norm_backward_xhat(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                const Tensor& xhat, const Tensor& weight,
                                const Tensor& rstd) override {
    run([&](Backend& be) {
      be.layer_norm_backward_xhat(dsrc, dweight, dbias, ddst, xhat, weight, rstd);
    });
  }

  void batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                  Tensor& running_var, const Tensor& src, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps) override {
    run([&](Backend& be) {
      be.batch_norm(dst, save_mean, save_invstd, running_mean, running_var, src, weight, bias,
                    training, momentum, eps);
    });
  }
  void batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                           const Tensor& src, const Tensor& weight, const Tensor& save_mean,
                           const Tensor& save_invstd) override {
    run([&](Backend& be) {
      be.batch_norm_backward(dsrc, dweight, dbias, ddst, src, weight, save_mean, save_invstd);
    });
  }
  void embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) override {
    run([&](Backend& be) { be.embedding(dst, weight, indices); });
  }
  void embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override {
    run([&](Backend& be) { be.embedding_backward(dweight, ddst, indices); });
  }
  void embedding_backward_add(Tensor& dweight, const Tensor& ddst, const Tensor& indices) override {
    run([&](Backend& be) { be.embedding_backward_add(dweight, ddst, indices); });
  }
  void max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override {
    run([&](Backend& be) { be.max_pool2d(dst, src, p); });
  }
  void max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                           const Pool2dParams& p) override {
    run([&](Backend& be) { be.max_pool2d_backward(dsrc, ddst, src, p); });
  }
  void avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) override {
    run([&](Backend& be) { be.avg_pool2d(dst, src, p); });
  }
  void avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) override {
    run([&](Backend& be) { be.avg_pool2d_backward(dsrc, ddst, p); });
  }
  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
              const MatmulConfig& cfg) override {
    run([&](Backend& be) { be.matmul(dst, a, b, bias, cfg); });
  }
  bool fp8_matmul() const override { return backend().fp8_matmul(); }
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& p) override {
    run([&](Backend& be) { be.conv2d(dst, src, weight, bias, p); });
  }
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                            const Conv2dParams& p) override {
    run([&](Backend& be) { be.conv2d_backward_data(dsrc, ddst, weight, p); });
  }
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                               const Tensor& src, const Conv2dParams& p) override {
    run([&](Backend& be) { be.conv2d_backward_weights(dweight, dbias, ddst, src, p); });
  }
  void attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                 bool causal, double scale) override {
    run([&](Backend& be) { be.attention(dst, lse, q, k, v, causal, scale); });
  }
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& dst, const Tensor& lse,
                          bool causal, double scale) override {
    run([&](Backend& be) {
      be.attention_backward(dq, dk, dv, ddst, q, k, v, dst, lse, causal, scale);
    });
  }
  bool attention_strided() const override { return backend().attention_strided(); }

  void cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                     const Tensor& targets) override {
    run([&](Backend& be) { be.cross_entropy(loss, lse, logits, targets); });
  }
  void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse) override {
    run([&](Backend& be) { be.cross_entropy_backward(dlogits, dloss, logits, targets, lse); });
  }
  void cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                              const Tensor& targets, int64_t classes) override {
    run([&](Backend& be) { be.cross_entropy_in_place(loss, lse, logits, targets, classes); });
  }
  void cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& targets,
                                       const Tensor& lse, int64_t classes) override {
    run([&](Backend& be) {
      be.cross_entropy_in_place_backward(dlogits, dloss, targets, lse, classes);
    });
  }
  void layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                       const Tensor& rstd) override {
    run([&](Backend& be) { be.layer_norm_xhat(dst, src, mean, rstd); });
  }
  void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) override {
    run([&](Backend& be) { be.unscale_check(grad, found_inf, inv_scale); });
  }
  void sum_squares(Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.sum_squares(dst, src); });
  }
  void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) override {
    run([&](Backend& be) { be.optimizer_update(u, rule); });
  }
  void amax(Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.amax(dst, src); });
  }
  void minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
              int64_t inner) override {
    run([&](Backend& be) { be.minmax(min, max, src, channels, inner); });
  }
  void quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) override {
    run([&](Backend& be) { be.quantize(spec, dst, aux, src); });
  }
  void lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales, Tensor& mask,
                    const Tensor& src) override {
    run([&](Backend& be) { be.lowbit_codes(spec, codes, scales, mask, src); });
  }
  void lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                             const Tensor& inv_scales, int64_t inner) override {
    run([&](Backend& be) { be.lowbit_codes_backward(dsrc, ddst, mask, inv_scales, inner); });
  }
  void mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) override {
    run([&](Backend& be) { be.mask_grad(dsrc, ddst, mask); });
  }
  void scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                      Activation act) override {
    run([&](Backend& be) { be.scale_bias_act(dst, src, bias, alpha, act); });
  }
  void fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv,
                        const Fp8ScaleUpdate& u) override {
    run([&](Backend& be) { be.fp8_scale_update(history, scale, scale_inv, u); });
  }
  void count_nonfinite(Tensor& dst, const Tensor& src) override {
    run([&](Backend& be) { be.count_nonfinite(dst, src); });
  }
  void binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target,
                            bool logits) override {
    run([&](Backend& be) { be.binary_cross_entropy(loss, x, target, logits); });
  }
  void binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss,
                                     const Tensor& x, const Tensor& target, bool logits) override {
    run([&](Backend& be) {
      be.binary_cross_entropy_backward(dx, dtarget, dloss, x, target, logits);
    });
  }
};

}  // namespace

Backend& guarded_backend() {
  static GuardedBackend* b = new GuardedBackend();
  return *b;
}

}  // namespace mixp::detail
