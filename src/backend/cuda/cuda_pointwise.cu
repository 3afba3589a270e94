// The pointwise kernels (copy, convert, fill, unary, binary, scalar, add_inplace, dropout) over
// strided views of up to kMaxRank dims: one thread per element of dst, grid-stride loop. The
// element math is math/pointwise_math.h, tested on the CPU by tests/cuda.
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/math/pointwise_math.h"

namespace mixp::cuda {
namespace {

__device__ inline void copy_raw(const PointwiseArgs& a, int64_t od, int64_t oa) {
  switch (a.dst.type) {
    case Elem::raw1: static_cast<uint8_t*>(a.dst.data)[od] = static_cast<const uint8_t*>(a.a.data)[oa]; return;
    case Elem::raw2:
    case Elem::bf16:
    case Elem::f16: static_cast<uint16_t*>(a.dst.data)[od] = static_cast<const uint16_t*>(a.a.data)[oa]; return;
    case Elem::raw4:
    case Elem::f32:
    case Elem::tf32: static_cast<uint32_t*>(a.dst.data)[od] = static_cast<const uint32_t*>(a.a.data)[oa]; return;
    case Elem::raw8: static_cast<uint64_t*>(a.dst.data)[od] = static_cast<const uint64_t*>(a.a.data)[oa]; return;
    case Elem::e4m3:
    case Elem::e5m2: static_cast<uint8_t*>(a.dst.data)[od] = static_cast<const uint8_t*>(a.a.data)[oa]; return;
  }
}

__global__ void pointwise_kernel(const PointwiseArgs a, int64_t n) {
  using namespace cuda_math;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t od = offset_of(i, a.shape, a.dst.stride);
    switch (a.kind) {
      case PointwiseKind::copy:
        if (a.dst.type == a.a.type) {
          copy_raw(a, od, offset_of(i, a.shape, a.a.stride));
        } else {
          store_rne(a.dst.data, a.dst.type, od, load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride)));
        }
        break;
      case PointwiseKind::convert: {
        const float v = load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride));
        const uint32_t r = a.round == Round::stochastic ? sr_bits(a.seed, static_cast<uint64_t>(i)) : 0;
        store_f(a.dst.data, a.dst.type, od, v, a.round, a.overflow, r);
        break;
      }
      case PointwiseKind::fill:
        store_rne(a.dst.data, a.dst.type, od, a.s);
        break;
      case PointwiseKind::unary:
        store_rne(a.dst.data, a.dst.type, od,
                  unary_fwd(a.op, load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride))));
        break;
      case PointwiseKind::unary_bwd: {
        const float g = load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride));
        const float x = a.b.data ? load_f(a.b.data, a.b.type, offset_of(i, a.shape, a.b.stride)) : 0.0f;
        const float y = a.c.data ? load_f(a.c.data, a.c.type, offset_of(i, a.shape, a.c.stride)) : 0.0f;
        store_rne(a.dst.data, a.dst.type, od, unary_bwd(a.op, g, x, y));
        break;
      }
      case PointwiseKind::binary:
        store_rne(a.dst.data, a.dst.type, od,
                  binary_fwd(a.op, load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride)),
                             load_f(a.b.data, a.b.type, offset_of(i, a.shape, a.b.stride))));
        break;
      case PointwiseKind::scalar:
        store_rne(a.dst.data, a.dst.type, od,
                  scalar_fwd(a.op, load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride)), a.s));
        break;
      case PointwiseKind::add_inplace: {
        const float d = load_f(a.dst.data, a.dst.type, od);
        const float x = load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride));
        store_rne(a.dst.data, a.dst.type, od, d + a.s * x);
        break;
      }
      case PointwiseKind::dropout: {
        const float x = load_f(a.a.data, a.a.type, offset_of(i, a.shape, a.a.stride));
        const bool keep = dropout_keep(a.seed, static_cast<uint64_t>(i), a.threshold);
        store_rne(a.dst.data, a.dst.type, od, keep ? x * a.s : 0.0f);
        break;
      }
    }
  }
}

}  // namespace

void launch_pointwise(const PointwiseArgs& args, cudaStream_t stream) {
  const int64_t n = args.shape.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  pointwise_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(args, n);
}

}  // namespace mixp::cuda
