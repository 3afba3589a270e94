// GradScaler's unscale with the inf/NaN check (step_kernels.h), moved from amp/grad_scaler.cpp.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "backend/cpu/step_kernels.h"
#include "mixp/format/convert.h"

namespace mixp::step_kernels {

namespace {

constexpr int64_t kParallelGrain = 1 << 15;

// g *= inv for every element; returns true when an element was inf/NaN before the multiply
// (torch._amp_foreach_non_finite_check_and_unscale_). inv == 1 leaves the values alone.
template <class T>
bool unscale_span(T* g, int64_t n, float inv) {
  const T m = static_cast<T>(inv);
  const bool scale = inv != 1.0f;
  int bad = 0;
  if (n < kParallelGrain || omp_get_max_threads() == 1) {
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; ++i) {
      const T v = g[i];
      bad |= !std::isfinite(v);
      g[i] = scale ? v * m : v;
    }
    return bad != 0;
  }
#pragma omp parallel for simd reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T v = g[i];
    bad |= !std::isfinite(v);
    g[i] = scale ? v * m : v;
  }
  return bad != 0;
}

// Gradients stored in a 16-bit or 8-bit float: widened in chunks, unscaled in fp32, rounded back
// to nearest-even.
bool unscale_narrow(Tensor& g, float inv) {
  constexpr int64_t kChunk = 4096;
  const DType d = g.dtype();
  const size_t esz = g.element_size();
  auto* base = static_cast<unsigned char*>(g.data_ptr());
  bool bad = false;
  std::vector<float> buf(kChunk);
  for (int64_t lo = 0, n = g.numel(); lo < n; lo += kChunk) {
    const int64_t k = std::min(kChunk, n - lo);
    std::span<float> s(buf.data(), static_cast<size_t>(k));
    convert_to_f32(d, base + lo * esz, s);
    bad = unscale_span(buf.data(), k, inv) || bad;
    convert_f32_to(d, s, base + lo * esz,
                   {.round = Round::nearest_even, .overflow = Overflow::ieee});
  }
  return bad;
}

}  // namespace

void unscale_check(Tensor& g, Tensor& found_inf, double inv_scale) {
  if (!g.is_contiguous() || found_inf.dtype() != DType::fp32 || found_inf.numel() != 1)
    throw std::logic_error("mixp: unscale_check needs a contiguous gradient and an fp32 flag");
  const float inv = static_cast<float>(inv_scale);
  bool bad = false;
  switch (g.dtype()) {
    case DType::fp32:
      bad = unscale_span(g.data<float>(), g.numel(), inv);
      break;
    case DType::fp64:
      bad = unscale_span(g.data<double>(), g.numel(), inv);
      break;
    default:
      if (!is_elementwise_float(g.dtype())) {
        throw std::invalid_argument(fmt::format(
            "mixp::amp::GradScaler::unscale_: gradients of dtype {} cannot be unscaled; "
            "gradients are fp32, fp64 or an element-wise float format",
            name(g.dtype())));
      }
      bad = unscale_narrow(g, inv);
  }
  if (bad) *found_inf.data<float>() = 1.0f;
}

}  // namespace mixp::step_kernels
