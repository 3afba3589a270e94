// Front ends of the pointwise ops: binary (broadcasting), scalar, unary, dropout, operators.
#include <atomic>

#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "mixp/tensor/generator.h"
#include "ops/dispatch.h"
#include "ops/dropout_seed.h"

namespace mixp {
using namespace detail;

namespace {

// 16-bit results (bf16, fp16 inputs of one dtype): the backend kernels read and write the 16-bit
// tensors directly and compute in fp32 (backend.h), so nothing is widened in memory, the tensors
// saved for backward stay 16-bit, and the backward node runs in that dtype (its gradients arrive
// and leave 16-bit, as for PyTorch's bf16 tensors). Other results compute in fp32/fp64 copies.
DType pointwise_compute(DType result) {
  return kern::is_narrow(result) ? result : compute_of(result);
}

Tensor binary_op(OpId id, BinaryOp bop, const Tensor& a0, const Tensor& b0) {
  const char* nm = op_name(id).data();
  check_defined(a0, nm, "a");
  check_defined(b0, nm, "b");
  Tensor in[2] = {a0, b0};
  apply_cast_policy(id, in);
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), nm);
  const DType rd = result_dtype({&a, &b});
  const DType c = pointwise_compute(rd);
  // fp32 results with 16-bit operands (a bf16 activation added to the fp32 residual stream): the
  // backend widens them in registers; no fp32 copy is made or saved.
  auto operand = [&](const Tensor& t) {
    return c == DType::fp32 && kern::is_narrow(t.dtype()) ? t : as_compute(t, c);
  };
  const Tensor ac = operand(a), bc = operand(b);
  Tensor out = new_tensor(shape, c, common_device({&a, &b}));
  backend_for(out).binary(bop, out, raw_expand(ac, shape), raw_expand(bc, shape));
  out = finish(out, rd);
  if (should_record({&a, &b})) {
    const Shape sa = a.shape(), sb = b.shape();
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    // mul/div keep their operands (only the ones the other gradient needs).
    Tensor keep_a = (bop == BinaryOp::mul && need_b) || (bop == BinaryOp::div && need_b)
                        ? ac.detach()
                        : Tensor();
    Tensor keep_b =
        (bop == BinaryOp::mul && need_a) || bop == BinaryOp::div ? bc.detach() : Tensor();
    record(id, c, {&a, &b}, {&out}, [bop, sa, sb, keep_a, keep_b](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      switch (bop) {
        case BinaryOp::add:
          if (ctx.needs(0)) ctx.grad_inputs[0] = sum_to(g, sa);
          if (ctx.needs(1)) ctx.grad_inputs[1] = sum_to(g, sb);
          break;
        case BinaryOp::sub:
          if (ctx.needs(0)) ctx.grad_inputs[0] = sum_to(g, sa);
          if (ctx.needs(1)) ctx.grad_inputs[1] = sum_to(neg(g), sb);
          break;
        case BinaryOp::mul:
          if (ctx.needs(0)) ctx.grad_inputs[0] = sum_to(mul(g, keep_b), sa);
          if (ctx.needs(1)) ctx.grad_inputs[1] = sum_to(mul(g, keep_a), sb);
          break;
        case BinaryOp::div: {
          const Tensor ga = div(g, keep_b);
          if (ctx.needs(0)) ctx.grad_inputs[0] = sum_to(ga, sa);
          // d(a/b)/db = -a/b^2 = -(g/b) * a / b
          if (ctx.needs(1)) ctx.grad_inputs[1] = sum_to(neg(div(mul(ga, keep_a), keep_b)), sb);
          break;
        }
      }
    });
  }
  return out;
}

// The one-input front ends' start: the input after the cast policy (x), its result dtype (rd),
// the dtype the kernel computes in (c) and the input in it (xc).
struct OneInput {
  Tensor x;
  DType rd, c;
  Tensor xc;
};
OneInput one_input(OpId id, const Tensor& x0) {
  check_defined(x0, op_name(id).data(), "x");
  Tensor in[1] = {x0};
  apply_cast_policy(id, in);
  const DType rd = result_dtype({&in[0]});
  const DType c = pointwise_compute(rd);
  Tensor xc = as_compute(in[0], c);
  return OneInput{in[0], rd, c, xc};
}

Tensor scalar_op(OpId id, ScalarOp sop, const Tensor& x0, double s) {
  const auto [x, rd, c, xc] = one_input(id, x0);
  Tensor out = new_tensor(x.shape(), c, x.device());
  backend_for(out, xc).scalar(sop, out, xc, s);
  out = finish(out, rd);
  if (should_record({&x})) {
    Tensor keep = sop == ScalarOp::pow || sop == ScalarOp::rdiv ? xc.detach() : Tensor();
    record(id, c, {&x}, {&out}, [sop, s, keep](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      switch (sop) {
        case ScalarOp::add:
          ctx.grad_inputs[0] = g;
          break;
        case ScalarOp::mul:
          ctx.grad_inputs[0] = mul(g, s);
          break;
        case ScalarOp::rsub:
          ctx.grad_inputs[0] = neg(g);
          break;
        case ScalarOp::pow:  // s * x^(s-1)
          ctx.grad_inputs[0] = mul(g, mul(pow(keep, s - 1.0), s));
          break;
        case ScalarOp::rdiv:  // -s / x^2
          ctx.grad_inputs[0] = mul(g, rdiv(-s, mul(keep, keep)));
          break;
      }
    });
  }
  return out;
}

Tensor unary_op(OpId id, UnaryOp uop, const Tensor& x0) {
  const auto [x, rd, c, xc] = one_input(id, x0);
  Tensor yc = new_tensor(x.shape(), c, x.device());
  backend_for(yc, xc).unary(uop, yc, xc);
  Tensor out = finish(yc, rd);
  if (should_record({&x})) {
    Tensor keep_x = kern::unary_bwd_needs_src(uop) ? xc.detach() : Tensor();
    Tensor keep_y = kern::unary_bwd_needs_dst(uop) ? yc.detach() : Tensor();
    record(id, c, {&x}, {&out}, [uop, keep_x, keep_y](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      Tensor gi = new_tensor(g.shape(), g.dtype(), g.device());
      backend_for(gi, g, keep_x, keep_y).unary_backward(uop, gi, g, keep_x, keep_y);
      ctx.grad_inputs[0] = gi;
    });
  }
  return out;
}

}  // namespace

// The front ends whose op id (autograd/op_list.h) and kernel code (backend/op_codes.h) share their
// name: one line each (docs/architecture.md 10, "add an op").
#define MIXP_BINARY_FRONT_END(name)                     \
  Tensor name(const Tensor& a, const Tensor& b) {       \
    return binary_op(OpId::name, BinaryOp::name, a, b); \
  }
#define MIXP_UNARY_FRONT_END(name)                 \
  Tensor name(const Tensor& a) {                   \
    return unary_op(OpId::name, UnaryOp::name, a); \
  }
MIXP_BINARY_FRONT_END(add)
MIXP_BINARY_FRONT_END(sub)
MIXP_BINARY_FRONT_END(mul)
MIXP_BINARY_FRONT_END(div)
MIXP_UNARY_FRONT_END(neg)
MIXP_UNARY_FRONT_END(exp)
MIXP_UNARY_FRONT_END(log)
MIXP_UNARY_FRONT_END(sqrt)
MIXP_UNARY_FRONT_END(relu)
MIXP_UNARY_FRONT_END(tanh)
MIXP_UNARY_FRONT_END(sigmoid)
MIXP_UNARY_FRONT_END(sin)
MIXP_UNARY_FRONT_END(cos)
#undef MIXP_UNARY_FRONT_END
#undef MIXP_BINARY_FRONT_END

Tensor add(const Tensor& a, double s) {
  return scalar_op(OpId::add_scalar, ScalarOp::add, a, s);
}
Tensor mul(const Tensor& a, double s) {
  return scalar_op(OpId::mul_scalar, ScalarOp::mul, a, s);
}
Tensor pow(const Tensor& a, double e) {
  return scalar_op(OpId::pow_scalar, ScalarOp::pow, a, e);
}
Tensor rsub(double s, const Tensor& a) {
  return scalar_op(OpId::rsub_scalar, ScalarOp::rsub, a, s);
}
Tensor rdiv(double s, const Tensor& a) {
  return scalar_op(OpId::rdiv_scalar, ScalarOp::rdiv, a, s);
}
Tensor gelu(const Tensor& a) {
  return gelu(a, GeluApprox::none);
}
Tensor gelu(const Tensor& a, GeluApprox approximate) {
  return unary_op(OpId::gelu, approximate == GeluApprox::tanh ? UnaryOp::gelu : UnaryOp::gelu_erf,
                  a);
}

namespace {
// Constant-initialized, so it is set before any dynamic initializer could draw a seed.
std::atomic<detail::DropoutSeedSource> g_dropout_seed_source{nullptr};
}  // namespace

void detail::set_dropout_seed_source(DropoutSeedSource source) {
  g_dropout_seed_source.store(source);
}
uint64_t detail::dropout_seed(Generator& gen) {
  const DropoutSeedSource source = g_dropout_seed_source.load();
  return source ? source(gen) : gen.next_u64();
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0.0) return x;
  return dropout(x, p, training, detail::dropout_seed(gen));
}

Tensor dropout(const Tensor& x0, double p, bool training, uint64_t seed) {
  check_defined(x0, "dropout", "x");
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument(fmt::format("mixp::dropout: p must be in [0, 1], got {}", p));
  if (!training || p == 0.0) return x0;
  Tensor in[1] = {x0};
  apply_cast_policy(OpId::dropout, in);
  const Tensor& x = in[0];
  if (p == 1.0) return mul(x, 0.0);
  const DType rd = result_dtype({&x});
  const DType c = pointwise_compute(rd);
  const Tensor xc = as_compute(x, c);
  Tensor out = new_tensor(x.shape(), c, x.device());
  backend_for(out, xc).dropout(out, xc, p, seed);
  out = finish(out, rd);
  if (should_record({&x})) {
    record(OpId::dropout, c, {&x}, {&out}, [p, seed](BackwardContext& ctx) {
      const Tensor g = raw_contiguous(ctx.grad());
      Tensor gi = new_tensor(g.shape(), g.dtype(), g.device());
      backend_for(gi, g).dropout(gi, g, p, seed);
      ctx.grad_inputs[0] = gi;
    });
  }
  return out;
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double s) {
  return add(a, s);
}
Tensor operator-(const Tensor& a, double s) {
  return add(a, -s);
}
Tensor operator*(const Tensor& a, double s) {
  return mul(a, s);
}
Tensor operator/(const Tensor& a, double s) {
  return mul(a, 1.0 / s);
}
Tensor operator+(double s, const Tensor& a) {
  return add(a, s);
}
Tensor operator-(double s, const Tensor& a) {
  return rsub(s, a);
}
Tensor operator*(double s, const Tensor& a) {
  return mul(a, s);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}

}  // namespace mixp
