// Ref backend: embedding and 2-D pooling.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"

namespace mixp {
using namespace kern;

namespace {
int64_t index_at(const Tensor& idx, int64_t i) {
  return kern::index_at(idx, i, "mixp::embedding: indices");
}
}  // namespace

void RefBackend::embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "embedding", [&](auto t) {
    using T = decltype(t);
    const int64_t V = weight.shape()[0], E = weight.shape()[1], n = indices.numel();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = index_at(indices, i);
      if (row < 0 || row >= V)
        throw std::out_of_range("mixp::embedding: index " + std::to_string(row) + " out of [0, " +
                                std::to_string(V) + ")");
      for (int64_t e = 0; e < E; ++e)
        ptr<T>(dst)[i * E + e] =
            ptr<T>(weight)[row * weight.strides()[0] + e * weight.strides()[1]];
    }
  });
}

void RefBackend::embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) {
  count_ref_kernel(__func__);
  dispatch_float(dweight.dtype(), "embedding backward", [&](auto t) {
    using T = decltype(t);
    const int64_t E = dweight.shape()[1], n = indices.numel();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = index_at(indices, i);
      for (int64_t e = 0; e < E; ++e) {
        const int64_t lin = i * E + e;
        ptr<T>(dweight)[row * E + e] +=
            ptr<T>(ddst)[ddst.is_contiguous() ? lin : offset_of(ddst, lin)];
      }
    }
  });
}

void RefBackend::embedding_backward_add(Tensor& dweight, const Tensor& ddst,
                                        const Tensor& indices) {
  count_ref_kernel(__func__);
  dispatch_float(dweight.dtype(), "embedding backward", [&](auto t) {
    using T = decltype(t);
    const int64_t V = dweight.shape()[0], E = dweight.shape()[1], n = indices.numel();
    // Positions referencing each row, in index order.
    std::vector<std::vector<int64_t>> at(static_cast<size_t>(V));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = index_at(indices, i);
      if (row < 0 || row >= V)
        throw std::out_of_range("mixp::embedding: index " + std::to_string(row) + " out of [0, " +
                                std::to_string(V) + ")");
      at[static_cast<size_t>(row)].push_back(i);
    }
    auto dw = [&](int64_t row, int64_t e) -> T& {
      return ptr<T>(dweight)[row * dweight.strides()[0] + e * dweight.strides()[1]];
    };
    for (int64_t row = 0; row < V; ++row) {
      for (int64_t e = 0; e < E; ++e) {
        T s = T(0);  // the dense buffer's element: its contributions summed from +0 in order
        for (int64_t i : at[static_cast<size_t>(row)]) {
          const int64_t lin = i * E + e;
          s += ptr<T>(ddst)[ddst.is_contiguous() ? lin : offset_of(ddst, lin)];
        }
        dw(row, e) = dw(row, e) + s;
      }
    }
  });
}

namespace {
struct PoolGeom {
  int64_t N, C, H, W, OH, OW;
};
PoolGeom geom(const Tensor& src, const Tensor& dst) {
  return {src.shape()[0], src.shape()[1], src.shape()[2],
          src.shape()[3], dst.shape()[2], dst.shape()[3]};
}
// Calls f(n, c, oh, ow, lin) for every output of a pooling, in row-major order; lin is the
// output's index in a contiguous [N, C, OH, OW] tensor.
template <class F>
void for_each_pool_output(const PoolGeom& g, F&& f) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow)
          f(n, c, oh, ow, ((n * g.C + c) * g.OH + oh) * g.OW + ow);
}
}  // namespace

void RefBackend::max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "max_pool2d", [&](auto t) {
    using T = decltype(t);
    const PoolGeom g = geom(src, dst);
    const auto& ss = src.strides();
    for_each_pool_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow, int64_t lin) {
      T best = -std::numeric_limits<T>::infinity();
      for_each_in_window(p, oh, ow, g.H, g.W, [&](int64_t h, int64_t w) {
        const T v = ptr<T>(src)[n * ss[0] + c * ss[1] + h * ss[2] + w * ss[3]];
        if (v > best || std::isnan(v)) best = v;
      });
      ptr<T>(dst)[lin] = best;
    });
  });
}

void RefBackend::max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                     const Pool2dParams& p) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "max_pool2d backward", [&](auto t) {
    using T = decltype(t);
    const PoolGeom g = geom(src, ddst);
    const auto& ss = src.strides();
    T* gi = ptr<T>(dsrc);
    for (int64_t i = 0; i < dsrc.numel(); ++i) gi[i] = T(0);
    for_each_pool_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow, int64_t lin) {
      T best = -std::numeric_limits<T>::infinity();
      int64_t arg = -1;
      for_each_in_window(p, oh, ow, g.H, g.W, [&](int64_t h, int64_t w) {
        const T v = ptr<T>(src)[n * ss[0] + c * ss[1] + h * ss[2] + w * ss[3]];
        if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          arg = h * g.W + w;
        }
      });
      if (arg >= 0)
        gi[(n * g.C + c) * g.H * g.W + arg] +=
            ptr<T>(ddst)[ddst.is_contiguous() ? lin : offset_of(ddst, lin)];
    });
  });
}

void RefBackend::avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "avg_pool2d", [&](auto t) {
    using T = decltype(t);
    const PoolGeom g = geom(src, dst);
    const auto& ss = src.strides();
    const double area = static_cast<double>(p.kernel_h * p.kernel_w);
    for_each_pool_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow, int64_t lin) {
      double s = 0;
      for_each_in_window(p, oh, ow, g.H, g.W, [&](int64_t h, int64_t w) {
        s += static_cast<double>(ptr<T>(src)[n * ss[0] + c * ss[1] + h * ss[2] + w * ss[3]]);
      });
      ptr<T>(dst)[lin] = static_cast<T>(s / area);
    });
  });
}

void RefBackend::avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "avg_pool2d backward", [&](auto t) {
    using T = decltype(t);
    const PoolGeom g = geom(dsrc, ddst);
    const double area = static_cast<double>(p.kernel_h * p.kernel_w);
    T* gi = ptr<T>(dsrc);
    for (int64_t i = 0; i < dsrc.numel(); ++i) gi[i] = T(0);
    for_each_pool_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow, int64_t lin) {
      const double gv =
          static_cast<double>(ptr<T>(ddst)[ddst.is_contiguous() ? lin : offset_of(ddst, lin)]) /
          area;
      for_each_in_window(p, oh, ow, g.H, g.W, [&](int64_t h, int64_t w) {
        gi[(n * g.C + c) * g.H * g.W + h * g.W + w] += static_cast<T>(gv);
      });
    });
  });
}

}  // namespace mixp
