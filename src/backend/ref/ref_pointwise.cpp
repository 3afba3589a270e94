// Ref backend: copies, conversions and pointwise kernels over arbitrary strides.
#include <cstring>

#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "backend/ref/ref_backend.h"
#include "mixp/tensor/element.h"

namespace mixp {
using namespace kern;

void RefBackend::copy(Tensor& dst, const Tensor& src) {
  count_ref_kernel(__func__);
  convert(dst, src, Round::nearest_even, Overflow::ieee, 0);
}

void RefBackend::convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
                         uint64_t seed) {
  count_ref_kernel(__func__);
  if (dst.shape() != src.shape())
    throw std::invalid_argument("ref copy: shapes " + dst.shape().str() + " and " +
                                src.shape().str());
  void* d = dst.data_ptr();
  const void* s = src.data_ptr();
  const DType dd = dst.dtype(), sd = src.dtype();
  if (dd == sd) {
    const size_t es = dst.element_size();
    for_each2(dst.shape(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
      std::memcpy(static_cast<char*>(d) + od * static_cast<int64_t>(es),
                  static_cast<const char*>(s) + os * static_cast<int64_t>(es), es);
    });
    return;
  }
  int64_t i = 0;
  for_each2(dst.shape(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
    const uint32_t rb = round == Round::stochastic ? sr_bits(seed, static_cast<uint64_t>(i)) : 0;
    store_element(d, dd, od, load_element(s, sd, os), round, overflow, rb);
    ++i;
  });
}

void RefBackend::fill(Tensor& dst, double value) {
  count_ref_kernel(__func__);
  void* d = dst.data_ptr();
  const DType dt = dst.dtype();
  for_each2(dst.shape(), dst.strides(), dst.strides(), [&](int64_t od, int64_t) {
    store_element(d, dt, od, value, Round::nearest_even, Overflow::ieee, 0);
  });
}

void RefBackend::add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  count_ref_kernel(__func__);
  if (dst.dtype() == src.dtype() && (dst.dtype() == DType::fp32 || dst.dtype() == DType::fp64)) {
    dispatch_float(dst.dtype(), "add_", [&](auto t) {
      using T = decltype(t);
      T* d = ptr<T>(dst);
      const T* s = ptr<T>(src);
      const T a = static_cast<T>(alpha);
      for_each2(dst.shape(), dst.strides(), src.strides(),
                [&](int64_t od, int64_t os) { d[od] += a * s[os]; });
    });
    return;
  }
  void* d = dst.data_ptr();
  const void* s = src.data_ptr();
  for_each2(dst.shape(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
    const double v = load_element(d, dst.dtype(), od) + alpha * load_element(s, src.dtype(), os);
    store_element(d, dst.dtype(), od, v, Round::nearest_even, Overflow::ieee, 0);
  });
}

// Operands stored in bf16/fp16 compute in fp32: widened exactly, the kernel runs in fp32 (through
// the virtual call, so a derived backend's fp32 kernel), the result is rounded to dst's dtype.
void RefBackend::unary(UnaryOp op, Tensor& dst, const Tensor& src) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &src})) {
    const Tensor s = widen(*this, src, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { unary(op, d, s); });
    return;
  }
  dispatch_float(dst.dtype(), "unary op", [&](auto t) {
    using T = decltype(t);
    T* d = ptr<T>(dst);
    const T* s = ptr<T>(src);
    for_each2(dst.shape(), dst.strides(), src.strides(),
              [&](int64_t od, int64_t os) { d[od] = unary_fwd<T>(op, s[os]); });
  });
}

void RefBackend::unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                const Tensor& dst) {
  count_ref_kernel(__func__);
  if (any_narrow({&dsrc, &ddst, &src, &dst})) {
    const Tensor g = widen(*this, ddst, DType::fp32), x = widen(*this, src, DType::fp32),
                 y = widen(*this, dst, DType::fp32);
    with_dst_as(*this, dsrc, DType::fp32, false,
                [&](Tensor& d) { unary_backward(op, d, g, x, y); });
    return;
  }
  dispatch_float(dsrc.dtype(), "unary backward", [&](auto t) {
    using T = decltype(t);
    T* gi = ptr<T>(dsrc);
    const T* go = ptr<T>(ddst);
    const Tensor& xs = src.defined() ? src : ddst;  // placeholders where the op does not read them
    const Tensor& ys = dst.defined() ? dst : ddst;
    const T* x = ptr<T>(xs);
    const T* y = ptr<T>(ys);
    // Walk dsrc and ddst together; x/y through their own offsets from the linear index.
    int64_t i = 0;
    const bool xc = xs.is_contiguous(), yc = ys.is_contiguous();
    for_each2(dsrc.shape(), dsrc.strides(), ddst.strides(), [&](int64_t od, int64_t og) {
      const T xv = x[xc ? i : offset_of(xs, i)];
      const T yv = y[yc ? i : offset_of(ys, i)];
      gi[od] = unary_bwd<T>(op, go[og], xv, yv);
      ++i;
    });
  });
}

void RefBackend::binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &a, &b})) {
    const Tensor x = widen(*this, a, DType::fp32), y = widen(*this, b, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { binary(op, d, x, y); });
    return;
  }
  dispatch_float(dst.dtype(), "binary op", [&](auto t) {
    using T = decltype(t);
    T* d = ptr<T>(dst);
    const T* x = ptr<T>(a);
    const T* y = ptr<T>(b);
    for_each3(dst.shape(), dst.strides(), a.strides(), b.strides(),
              [&](int64_t od, int64_t oa, int64_t ob) { d[od] = binary_fwd<T>(op, x[oa], y[ob]); });
  });
}

void RefBackend::scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &src})) {
    const Tensor x = widen(*this, src, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { scalar(op, d, x, s); });
    return;
  }
  dispatch_float(dst.dtype(), "scalar op", [&](auto t) {
    using T = decltype(t);
    T* d = ptr<T>(dst);
    const T* x = ptr<T>(src);
    const T sv = static_cast<T>(s);
    for_each2(dst.shape(), dst.strides(), src.strides(),
              [&](int64_t od, int64_t os) { d[od] = scalar_fwd<T>(op, x[os], sv); });
  });
}

void RefBackend::dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &src})) {
    const Tensor x = widen(*this, src, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { dropout(d, x, p, seed); });
    return;
  }
  dispatch_float(dst.dtype(), "dropout", [&](auto t) {
    using T = decltype(t);
    T* d = ptr<T>(dst);
    const T* x = ptr<T>(src);
    const uint32_t thr = dropout_threshold(p);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    uint64_t i = 0;
    for_each2(dst.shape(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
      d[od] = dropout_keep(seed, i, thr) ? x[os] * scale : T(0);
      ++i;
    });
  });
}

}  // namespace mixp
