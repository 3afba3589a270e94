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
  void convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow, uint64_t seed) override;
  void fill(Tensor& dst, double value) override;
  void add_inplace(Tensor& dst, const Tensor& src, double alpha) override;

  void unary(UnaryOp op, Tensor& dst, const Tensor& src) override;
  void unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src, const Tensor& dst) override;
  void binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) override;
  void scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) override;
  void matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulConfig& cfg) override;
  void conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) override;
  void conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight, const Conv2dParams& p) override;
  void conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst, const Tensor& src,
                               const Conv2dParams& p) override;
};

}  // namespace mixp
