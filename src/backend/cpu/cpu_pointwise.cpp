// CpuBackend pointwise kernels: contiguous (or row-broadcast) fast paths as plain loops that GCC
// vectorizes at -O3, split across OpenMP threads above a size threshold; everything else goes to
// the strided ref kernels.
#include <omp.h>

#include <bit>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_layout.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/vec_kernels.h"
#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "mixp/format/convert.h"

namespace mixp {
using namespace kern;

namespace {
using cpu::parallel_worth;

// The n elements of a pointwise op in one chunk per thread, when that pays (cpu_parallel.h).
template <class F>
void parallel_chunks(int64_t n, F&& f) {
  cpu::parallel_for(n, n, std::forward<F>(f));
}

bool f32(const Tensor& t) {
  return t.dtype() == DType::fp32;
}

// ---- 16-bit operands (bf16, fp16): the kernels read and write them directly, converting blocks
// of kBlock elements to fp32 in an L1-resident buffer with the bulk SIMD converters, running the
// fp32 row kernel and rounding the result block back (nearest even). A bf16 pointwise op thus
// moves half the bytes of its fp32 twin instead of adding full-size conversion passes.
constexpr int64_t kBlock = 512;

// A dtype the pointwise fast paths handle (any layout).
bool pw_dtype(const Tensor& t) {
  return t.dtype() == DType::fp32 || is_narrow(t.dtype());
}

bool pw_ok(const Tensor& t) {
  return !t.defined() || ((t.dtype() == DType::fp32 || is_narrow(t.dtype())) && t.is_contiguous());
}

// n elements of t from element `off` as fp32: t's own memory for fp32, else converted into buf.
inline const float* load_f32(const Tensor& t, int64_t off, int64_t n, float* buf) {
  if (t.dtype() == DType::fp32) return static_cast<const float*>(t.data_ptr()) + off;
  convert_to_f32(t.dtype(), static_cast<const uint16_t*>(t.data_ptr()) + off,
                 std::span<float>(buf, static_cast<size_t>(n)));
  return buf;
}
inline float* out_f32(const Tensor& t, int64_t off, float* buf) {
  return t.dtype() == DType::fp32 ? static_cast<float*>(t.data_ptr()) + off : buf;
}
inline void store_f32(const Tensor& t, int64_t off, int64_t n, const float* y) {
  if (t.dtype() == DType::fp32) return;
  convert_f32_to(t.dtype(), std::span<const float>(y, static_cast<size_t>(n)),
                 static_cast<uint16_t*>(t.data_ptr()) + off,
                 ConvertOptions{Round::nearest_even, Overflow::ieee});
}
// f(offset, count) over [0, n) in blocks, the blocks split across threads.
template <class F>
void blocked(int64_t n, F&& f) {
  parallel_chunks(n, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; b += kBlock) f(b, std::min(kBlock, hi - b));
  });
}

// Offset of the start of row r (all dims but the last) in a strided tensor of this shape.
inline int64_t row_offset(const Shape& shape, const Shape& strides, int64_t r) {
  int64_t off = 0;
  for (int d = shape.size() - 2; d >= 0; --d) {
    off += (r % shape[d]) * strides[d];
    r /= shape[d];
  }
  return off;
}

// A transpose: dst[..., R, C] with unit stride along C from src with unit stride along R (e.g.
// the contiguous copy of t.t(), which the MXFP8 recipe makes of every weight, input and gradient
// for its column-wise blocks), in 32 x 32 tiles, instead of the row loop below, whose every
// element of a dst row comes from another source line. Returns false for other layouts.
template <class T>
bool transpose_copy(Tensor& dst, const Tensor& src) {
  const int nd = dst.dim();
  if (nd < 2) return false;
  const int64_t R = dst.shape()[nd - 2], C = dst.shape()[nd - 1];
  const int64_t dR = dst.strides()[nd - 2], sC = src.strides()[nd - 1];
  if (dst.strides()[nd - 1] != 1 || src.strides()[nd - 2] != 1 || sC == 1 || R < 2 || C < 2)
    return false;
  constexpr int64_t kTile = 32;
  const int64_t batches = dst.numel() / (R * C), rt = (R + kTile - 1) / kTile;
  T* d = static_cast<T*>(dst.data_ptr());
  const T* s = static_cast<const T*>(src.data_ptr());
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t b = u / rt, r0 = (u % rt) * kTile, r1 = std::min(R, r0 + kTile);
      T* db = d + row_offset(dst.shape(), dst.strides(), b * R);
      const T* sb = s + row_offset(src.shape(), src.strides(), b * R);
      // Through a padded tile on the stack: reading a source column run and writing a dst row
      // run are then both contiguous (strided accesses at a large power-of-two-like stride hit
      // one L1 set and thrash it).
      T tile[kTile][kTile + 1];
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t c1 = std::min(C, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c) {
          const T* sc = sb + c * sC;
          for (int64_t r = r0; r < r1; ++r) tile[c - c0][r - r0] = sc[r];
        }
        for (int64_t r = r0; r < r1; ++r) {
          T* dr = db + r * dR;
          for (int64_t c = c0; c < c1; ++c) dr[c] = tile[c - c0][r - r0];
        }
      }
    }
  };
  const int64_t units = batches * rt;
  if (parallel_worth(dst.numel()) && units > 1) {
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t chunk = (units + nt - 1) / nt;
      const int64_t lo = std::min<int64_t>(units, t * chunk),
                    hi = std::min<int64_t>(units, lo + chunk);
      if (lo < hi) run(lo, hi);
    }
  } else {
    run(0, units);
  }
  return true;
}

// Same-dtype copy between any two layouts of one shape, row by row (rows = last dim).
template <class T>
void strided_copy(Tensor& dst, const Tensor& src) {
  if (transpose_copy<T>(dst, src)) return;
  const int nd = dst.dim();
  const int64_t inner = dst.shape()[nd - 1];
  const int64_t rows = inner ? dst.numel() / inner : 0;
  const int64_t sd = dst.strides()[nd - 1], ss = src.strides()[nd - 1];
  T* d = static_cast<T*>(dst.data_ptr());
  const T* s = static_cast<const T*>(src.data_ptr());
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* dr = d + row_offset(dst.shape(), dst.strides(), r);
      const T* sr = s + row_offset(src.shape(), src.strides(), r);
      if (sd == 1 && ss == 1) {
        std::memcpy(dr, sr, sizeof(T) * static_cast<size_t>(inner));
      } else {
        for (int64_t i = 0; i < inner; ++i) dr[i * sd] = sr[i * ss];
      }
    }
  };
  if (parallel_worth(dst.numel()) && rows > 1) {
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t chunk = (rows + nt - 1) / nt;
      const int64_t lo = std::min<int64_t>(rows, t * chunk),
                    hi = std::min<int64_t>(rows, lo + chunk);
      if (lo < hi) run(lo, hi);
    }
  } else {
    run(0, rows);
  }
}
}  // namespace

namespace {
// The dtype pairs the contiguous paths of CpuBackend::convert handle.
bool is_cpu_float_pair(DType dd, DType sd) {
  if ((sd == DType::fp32 && dd == DType::fp64) || (sd == DType::fp64 && dd == DType::fp32))
    return true;
  return (sd == DType::fp32 && is_elementwise_float(dd)) ||
         (dd == DType::fp32 && is_elementwise_float(sd));
}
}  // namespace

void CpuBackend::copy(Tensor& dst, const Tensor& src) {
  convert(dst, src, Round::nearest_even, Overflow::ieee, 0);
}

void CpuBackend::convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
                         uint64_t seed) {
  const int64_t n = dst.numel();
  if (dst.is_contiguous() && src.is_contiguous() && dst.shape() == src.shape()) {
    const DType dd = dst.dtype(), sd = src.dtype();
    if (dd == sd) {
      char* d = static_cast<char*>(dst.data_ptr());
      const char* s = static_cast<const char*>(src.data_ptr());
      const int64_t es = static_cast<int64_t>(dst.element_size());
      parallel_chunks(n, [&](int64_t lo, int64_t hi) {
        std::memcpy(d + lo * es, s + lo * es, static_cast<size_t>((hi - lo) * es));
      });
      return;
    }
    if (sd == DType::fp32 && dd == DType::fp64) {
      const float* s = ptr<float>(src);
      double* d = ptr<double>(dst);
      parallel_chunks(n, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) d[i] = s[i];
      });
      return;
    }
    if (sd == DType::fp64 && dd == DType::fp32 && round == Round::nearest_even &&
        overflow == Overflow::ieee) {
      const double* s = ptr<double>(src);
      float* d = ptr<float>(dst);
      parallel_chunks(n, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) d[i] = static_cast<float>(s[i]);
      });
      return;
    }
    // fp32 <-> bf16/fp16/fp8/tf32: the bulk SIMD converters of mixp/format/convert.h, in
    // parallel chunks (the chunk offset keeps stochastic rounding independent of the chunking).
    if (sd == DType::fp32 && is_elementwise_float(dd)) {
      const float* s = ptr<float>(src);
      char* d = static_cast<char*>(dst.data_ptr());
      const int64_t es = static_cast<int64_t>(dst.element_size());
      parallel_chunks(n, [&](int64_t lo, int64_t hi) {
        const ConvertOptions opt{round, overflow, seed, static_cast<uint64_t>(lo)};
        convert_f32_to(dd, std::span<const float>(s + lo, static_cast<size_t>(hi - lo)),
                       d + lo * es, opt);
      });
      return;
    }
    if (dd == DType::fp32 && is_elementwise_float(sd)) {
      const char* s = static_cast<const char*>(src.data_ptr());
      float* d = ptr<float>(dst);
      const int64_t es = static_cast<int64_t>(src.element_size());
      parallel_chunks(n, [&](int64_t lo, int64_t hi) {
        convert_to_f32(sd, s + lo * es, std::span<float>(d + lo, static_cast<size_t>(hi - lo)));
      });
      return;
    }
  }
  if (dst.dtype() != src.dtype() && dst.shape() == src.shape() && dst.numel() > 0 &&
      (is_cpu_float_pair(dst.dtype(), src.dtype())) &&
      !(dst.is_contiguous() && src.is_contiguous())) {
    // A strided or broadcast view converted to another dtype: a same-dtype contiguous copy of the
    // source (strided_copy below), the bulk converter above, and a strided copy into dst. The
    // element order is the logical row-major one either way, so stochastic rounding draws the
    // same bits as for contiguous tensors (docs/engine.md).
    Tensor out = cpu::dense_out(dst);
    convert(out, cpu::dense(*this, src), round, overflow, seed);
    return cpu::write_back(*this, dst, out);
  }
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.dim() > 0) {
    switch (dst.element_size()) {
      case 1:
        return strided_copy<uint8_t>(dst, src);
      case 2:
        return strided_copy<uint16_t>(dst, src);
      case 4:
        return strided_copy<uint32_t>(dst, src);
      case 8:
        return strided_copy<uint64_t>(dst, src);
      default:
        break;
    }
  }
  RefBackend::convert(dst, src, round, overflow, seed);
}

void CpuBackend::fill(Tensor& dst, double value) {
  if (!dst.is_contiguous()) return RefBackend::fill(dst, value);
  const int64_t n = dst.numel();
  if (f32(dst)) {
    float* d = ptr<float>(dst);
    const float v = static_cast<float>(value);
    parallel_chunks(n, [&](int64_t lo, int64_t hi) { std::fill(d + lo, d + hi, v); });
  } else if (dst.dtype() == DType::fp64) {
    double* d = ptr<double>(dst);
    parallel_chunks(n, [&](int64_t lo, int64_t hi) { std::fill(d + lo, d + hi, value); });
  } else if (value == 0.0) {
    std::memset(dst.data_ptr(), 0, dst.nbytes());  // zero is all-zero bits in every format
  } else {
    RefBackend::fill(dst, value);
  }
}

void CpuBackend::add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  if (f32(dst) && f32(src) && dst.is_contiguous() && src.is_contiguous() &&
      dst.shape() == src.shape()) {
    float* d = ptr<float>(dst);
    const float* s = ptr<float>(src);
    const float a = static_cast<float>(alpha);
    parallel_chunks(dst.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] += a * s[i];
    });
    return;
  }
  if (any_narrow({&dst, &src}) && pw_ok(dst) && pw_ok(src) && dst.shape() == src.shape()) {
    const float a = static_cast<float>(alpha);
    blocked(dst.numel(), [&](int64_t off, int64_t n) {
      alignas(64) float bd[kBlock], bs[kBlock];
      float* d = const_cast<float*>(load_f32(dst, off, n, bd));
      const float* x = load_f32(src, off, n, bs);
      for (int64_t i = 0; i < n; ++i) d[i] += a * x[i];
      store_f32(dst, off, n, d);
    });
    return;
  }
  RefBackend::add_inplace(dst, src, alpha);
}

namespace {
// ReLU on bf16 bits, without converting: the fp32 kernel's x > 0 ? x : 0 keeps exactly the
// positive non-NaN values, bits 0x0001..0x7F80 (+inf included), and gives +0 for the rest (-0,
// negatives, NaN). Same results as widen + relu + narrow, which are exact here.
// As a mask (0xFFFF keep, 0 drop), branch-free: the signs of activations are random, and a
// branch per element mispredicts half the time.
inline uint16_t bf16_keep_mask(uint16_t b) {
  return static_cast<uint16_t>(-static_cast<int>(static_cast<uint16_t>(b - 1u) < 0x7F80u));
}
bool all_bf16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() != DType::bf16 || !t->is_contiguous()) return false;
  }
  return true;
}
}  // namespace

void CpuBackend::unary(UnaryOp op, Tensor& dst, const Tensor& src) {
  if (pw_dtype(dst) && pw_dtype(src) && dst.shape() == src.shape() &&
      !(dst.is_contiguous() && src.is_contiguous())) {
    // Strided views (an LSTM cell's gates, heads split from a projection): contiguous copies,
    // the fast kernel, the result copied back (cpu_layout.h).
    Tensor y = cpu::dense_out(dst);
    unary(op, y, cpu::dense(*this, src));
    return cpu::write_back(*this, dst, y);
  }
  if (op == UnaryOp::relu && all_bf16({&dst, &src}) && dst.shape() == src.shape()) {
    uint16_t* d = ptr<uint16_t>(dst);
    const uint16_t* s = ptr<uint16_t>(src);
    parallel_chunks(dst.numel(), [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) d[i] = s[i] & bf16_keep_mask(s[i]);
    });
    return;
  }
  if (op == UnaryOp::gelu && vec::kernels().gelu_bf16 && all_bf16({&dst, &src}) &&
      dst.shape() == src.shape()) {
    uint16_t* d = ptr<uint16_t>(dst);
    const uint16_t* s = ptr<uint16_t>(src);
    const auto f = vec::kernels().gelu_bf16;
    parallel_chunks(dst.numel(), [&](int64_t lo, int64_t hi) { f(d + lo, s + lo, hi - lo); });
    return;
  }
  if (any_narrow({&dst, &src}) && pw_ok(dst) && pw_ok(src) && dst.shape() == src.shape()) {
    const auto& k = vec::kernels();
    blocked(dst.numel(), [&](int64_t off, int64_t n) {
      alignas(64) float bx[kBlock], by[kBlock];
      const float* x = load_f32(src, off, n, bx);
      float* y = out_f32(dst, off, by);
      k.unary(op, y, x, n);
      store_f32(dst, off, n, y);
    });
    return;
  }
  if (!(f32(dst) && f32(src) && dst.is_contiguous() && src.is_contiguous()))
    return RefBackend::unary(op, dst, src);
  float* d = ptr<float>(dst);
  const float* s = ptr<float>(src);
  const auto& k = vec::kernels();
  parallel_chunks(dst.numel(),
                  [&](int64_t lo, int64_t hi) { k.unary(op, d + lo, s + lo, hi - lo); });
}

void CpuBackend::unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                const Tensor& dst) {
  const bool need_x = unary_bwd_needs_src(op), need_y = unary_bwd_needs_dst(op);
  if (pw_dtype(dsrc) && pw_dtype(ddst) && (!src.defined() || pw_dtype(src)) &&
      (!dst.defined() || pw_dtype(dst)) && dsrc.shape() == ddst.shape() &&
      !(dsrc.is_contiguous() && ddst.is_contiguous() && (!src.defined() || src.is_contiguous()) &&
        (!dst.defined() || dst.is_contiguous()))) {
    Tensor gi = cpu::dense_out(dsrc);
    unary_backward(op, gi, cpu::dense(*this, ddst), cpu::dense(*this, src),
                   cpu::dense(*this, dst));
    return cpu::write_back(*this, dsrc, gi);
  }
  if (op == UnaryOp::relu && dst.defined() && all_bf16({&dsrc, &ddst, &dst}) &&
      dsrc.shape() == ddst.shape() && dst.shape() == ddst.shape()) {
    // gi = y > 0 ? g : 0 on the bits (g passes unrounded: a bf16 value stays itself)
    uint16_t* gi = ptr<uint16_t>(dsrc);
    const uint16_t* g = ptr<uint16_t>(ddst);
    const uint16_t* y = ptr<uint16_t>(dst);
    parallel_chunks(dsrc.numel(), [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) gi[i] = g[i] & bf16_keep_mask(y[i]);
    });
    return;
  }
  if (op == UnaryOp::gelu && vec::kernels().gelu_bwd_bf16 && src.defined() &&
      all_bf16({&dsrc, &ddst, &src}) && dsrc.shape() == ddst.shape() &&
      src.shape() == ddst.shape()) {
    uint16_t* gi = ptr<uint16_t>(dsrc);
    const uint16_t* g = ptr<uint16_t>(ddst);
    const uint16_t* x = ptr<uint16_t>(src);
    const auto f = vec::kernels().gelu_bwd_bf16;
    parallel_chunks(dsrc.numel(),
                    [&](int64_t lo, int64_t hi) { f(gi + lo, g + lo, x + lo, hi - lo); });
    return;
  }
  if (any_narrow({&dsrc, &ddst, &src, &dst}) && pw_ok(dsrc) && pw_ok(ddst) &&
      (!need_x || (src.defined() && pw_ok(src))) && (!need_y || (dst.defined() && pw_ok(dst))) &&
      dsrc.shape() == ddst.shape()) {
    const auto& k = vec::kernels();
    blocked(dsrc.numel(), [&](int64_t off, int64_t n) {
      alignas(64) float bg[kBlock], bx[kBlock], by[kBlock], bo[kBlock];
      const float* g = load_f32(ddst, off, n, bg);
      const float* x = need_x ? load_f32(src, off, n, bx) : nullptr;
      const float* y = need_y ? load_f32(dst, off, n, by) : nullptr;
      float* gi = out_f32(dsrc, off, bo);
      k.unary_bwd(op, gi, g, x, y, n);
      store_f32(dsrc, off, n, gi);
    });
    return;
  }
  const bool ok = f32(dsrc) && f32(ddst) && dsrc.is_contiguous() && ddst.is_contiguous() &&
                  (!need_x || (f32(src) && src.is_contiguous())) &&
                  (!need_y || (f32(dst) && dst.is_contiguous()));
  if (!ok) return RefBackend::unary_backward(op, dsrc, ddst, src, dst);
  float* gi = ptr<float>(dsrc);
  const float* g = ptr<float>(ddst);
  const float* x = need_x ? ptr<float>(src) : nullptr;
  const float* y = need_y ? ptr<float>(dst) : nullptr;
  const auto& k = vec::kernels();
  parallel_chunks(dsrc.numel(), [&](int64_t lo, int64_t hi) {
    k.unary_bwd(op, gi + lo, g + lo, x ? x + lo : nullptr, y ? y + lo : nullptr, hi - lo);
  });
}

namespace {
// Inner loops of a binary op over one row, with each operand's inner stride 1 or 0.
template <BinaryOp OP>
void binary_row(float* d, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = binary_fwd<float>(OP, a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = b[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = binary_fwd<float>(OP, a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = a[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = binary_fwd<float>(OP, av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = binary_fwd<float>(OP, a[i * sa], b[i * sb]);
  }
}
void scalar_row(ScalarOp op, float* d, const float* x, float sv, int64_t n) {
  switch (op) {
    case ScalarOp::add:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = x[i] + sv;
      break;
    case ScalarOp::mul:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = x[i] * sv;
      break;
    case ScalarOp::rsub:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = sv - x[i];
      break;
    default:
      for (int64_t i = 0; i < n; ++i) d[i] = scalar_fwd<float>(op, x[i], sv);
  }
}

template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::add:
      return f(std::integral_constant<BinaryOp, BinaryOp::add>{});
    case BinaryOp::sub:
      return f(std::integral_constant<BinaryOp, BinaryOp::sub>{});
    case BinaryOp::mul:
      return f(std::integral_constant<BinaryOp, BinaryOp::mul>{});
    case BinaryOp::div:
      return f(std::integral_constant<BinaryOp, BinaryOp::div>{});
  }
}
}  // namespace

void CpuBackend::binary(BinaryOp op, Tensor& dst, const Tensor& a, const Tensor& b) {
  if (any_narrow({&dst, &a, &b})) {
    if (!(pw_ok(dst) && pw_ok(a) && pw_ok(b) && a.shape() == dst.shape() &&
          b.shape() == dst.shape())) {
      // Broadcast or strided 16-bit operands: widened exactly by the cpu converter, then the
      // fp32 path (which takes broadcast views as they are), the result rounded into dst.
      const Tensor x = kern::widen(*this, a, DType::fp32), y = kern::widen(*this, b, DType::fp32);
      kern::with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { binary(op, d, x, y); });
      return;
    }
    dispatch_binary(op, [&](auto opc) {
      constexpr BinaryOp OP = decltype(opc)::value;
      blocked(dst.numel(), [&](int64_t off, int64_t n) {
        alignas(64) float ba[kBlock], bb[kBlock], bd[kBlock];
        const float* x = load_f32(a, off, n, ba);
        const float* y = load_f32(b, off, n, bb);
        float* d = out_f32(dst, off, bd);
        binary_row<OP>(d, x, 1, y, 1, n);
        store_f32(dst, off, n, d);
      });
    });
    return;
  }
  if (!(f32(dst) && f32(a) && f32(b) && dst.is_contiguous()) || dst.dim() == 0)
    return RefBackend::binary(op, dst, a, b);
  const int nd = dst.dim();
  const int64_t inner = dst.shape()[nd - 1];
  const int64_t sa = a.strides()[nd - 1], sb = b.strides()[nd - 1];
  const bool same_contig = a.is_contiguous() && b.is_contiguous();
  float* d = ptr<float>(dst);
  const float* pa = ptr<float>(a);
  const float* pb = ptr<float>(b);
  dispatch_binary(op, [&](auto opc) {
    constexpr BinaryOp OP = decltype(opc)::value;
    if (same_contig) {
      parallel_chunks(dst.numel(), [&](int64_t lo, int64_t hi) {
        binary_row<OP>(d + lo, pa + lo, 1, pb + lo, 1, hi - lo);
      });
      return;
    }
    const int64_t rows = inner ? dst.numel() / inner : 0;
    auto run_rows = [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        binary_row<OP>(d + r * inner, pa + row_offset(dst.shape(), a.strides(), r), sa,
                       pb + row_offset(dst.shape(), b.strides(), r), sb, inner);
      }
    };
    if (parallel_worth(dst.numel()) && rows > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r) run_rows(r, r + 1);
    } else {
      run_rows(0, rows);
    }
  });
}

void CpuBackend::scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) {
  if (any_narrow({&dst, &src})) {
    if (!(pw_ok(dst) && pw_ok(src) && dst.shape() == src.shape()))
      return RefBackend::scalar(op, dst, src, s);
    const float sv = static_cast<float>(s);
    blocked(dst.numel(), [&](int64_t off, int64_t n) {
      alignas(64) float bx[kBlock], bd[kBlock];
      const float* x = load_f32(src, off, n, bx);
      float* d = out_f32(dst, off, bd);
      scalar_row(op, d, x, sv, n);
      store_f32(dst, off, n, d);
    });
    return;
  }
  if (f32(dst) && f32(src) && dst.is_contiguous() && !src.is_contiguous() &&
      dst.shape() == src.shape()) {
    copy(dst, src);  // gather first (broadcast views from reductions' backward), then in place
    return scalar(op, dst, dst, s);
  }
  if (!(f32(dst) && f32(src) && dst.is_contiguous() && src.is_contiguous()))
    return RefBackend::scalar(op, dst, src, s);
  float* d = ptr<float>(dst);
  const float* x = ptr<float>(src);
  const float sv = static_cast<float>(s);
  parallel_chunks(dst.numel(),
                  [&](int64_t lo, int64_t hi) { scalar_row(op, d + lo, x + lo, sv, hi - lo); });
}

}  // namespace mixp
