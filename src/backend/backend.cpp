// Backend registry, the thread-local BackendGuard, and the thread count.
#include "mixp/backend/backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_entry.h"
#include "backend/guarded_backend.h"
#include "backend/kernel_util.h"
#include "backend/observed_backend.h"
#include "backend/ref/ref_backend.h"
#include "mixp/backend/kernel_observer.h"

namespace mixp {

float fp8_scale_from_amax(float amax, float fp8_max, int margin, float previous) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  // TE: scaled_max = fp8_max * std::pow(2.f, -margin), then scaled_max / amax, all in fp32.
  const float scaled_max = fp8_max * std::ldexp(1.0f, -margin);
  const float s = scaled_max / amax;
  return std::isinf(s) ? FLT_MAX : s;
}

void Backend::embedding_backward_add(Tensor& dweight, const Tensor& ddst, const Tensor& indices) {
  // The dense sequence the override must match bit for bit.
  Tensor dense =
      Tensor::empty(dweight.shape(), {.dtype = dweight.dtype(), .device = dweight.device()});
  fill(dense, 0.0);
  embedding_backward(dense, ddst, indices);
  add_inplace(dweight, dense, 1.0);
}


int64_t Backend::layer_norm_xhat_block(int64_t rows, int64_t n) {
  constexpr int64_t kBlockElements = 1 << 16;
  return std::max<int64_t>(1, std::min<int64_t>(rows, kBlockElements / std::max<int64_t>(n, 1)));
}

void Backend::layer_norm_backward_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                       const Tensor& xhat, const Tensor& w, const Tensor& rstd) {
  const int64_t rows = rstd.numel(), n = rows ? xhat.numel() / rows : 0;
  // Blocks of rows, so that the widened xhat (fp32) exists for one block at a time: the point of
  // saving 16 bits is lost if the backward materializes all of it in fp32 at once.
  const int64_t block = layer_norm_xhat_block(rows, n);
  const Device dev = xhat.device();
  Tensor xh = Tensor::empty(Shape{block, n}, {.dtype = DType::fp32, .device = dev});
  Tensor zero = Tensor::empty(Shape{block}, {.dtype = DType::fp32, .device = dev}),
         one = Tensor::empty(Shape{block}, {.dtype = DType::fp32, .device = dev});
  fill(zero, 0.0);
  fill(one, 1.0);
  Tensor dw_part =
      dw.defined() ? Tensor::empty(Shape{n}, {.dtype = DType::fp32, .device = dev}) : Tensor();
  Tensor db_part =
      db.defined() ? Tensor::empty(Shape{n}, {.dtype = DType::fp32, .device = dev}) : Tensor();
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t nr = std::min(block, rows - r0);
    const Shape rs{nr, n}, st{n, 1};
    Tensor xh_b = kern::view_of(xh, rs, st, 0);
    // Row blocks of contiguous tensors (the offset is absolute in the storage).
    auto block_rows = [&](const Tensor& t) {
      return kern::view_of(t, rs, st, t.storage_offset() + r0 * n);
    };
    copy(xh_b, block_rows(xhat));  // widening: exact
    Tensor dx_b = block_rows(dx);
    Tensor z = kern::view_of(zero, Shape{nr}, Shape{1}, 0),
           o = kern::view_of(one, Shape{nr}, Shape{1}, 0);
    Tensor& dw_b = r0 == 0 ? dw : dw_part;
    Tensor& db_b = r0 == 0 ? db : db_part;
    layer_norm_backward(dx_b, dw_b, db_b, block_rows(dy), xh_b, w, z, o);
    if (r0 > 0 && dw.defined()) add_inplace(dw, dw_part, 1.0);
    if (r0 > 0 && db.defined()) add_inplace(db, db_part, 1.0);
    // dx of these rows times their rstd, while the block is still in cache (fp32 products,
    // rs_r * dx as before: the same bits).
    const Tensor rs_b = kern::view_of(rstd, rs, Shape{1, 0}, rstd.storage_offset() + r0);
    binary(BinaryOp::mul, dx_b, rs_b, dx_b);
  }
}

namespace {
BackendKind initial_default() {
  const char* e = std::getenv("MIXP_BACKEND");
  if (e && std::strcmp(e, "ref") == 0) return BackendKind::ref;
  return BackendKind::cpu;
}
BackendKind g_default = initial_default();
thread_local int g_override = -1;  // -1: none
}  // namespace

Backend& get_backend(BackendKind kind) {
  static RefBackend* ref = new RefBackend();
  static CpuBackend* cpu = new CpuBackend();
  return kind == BackendKind::ref ? static_cast<Backend&>(*ref) : static_cast<Backend&>(*cpu);
}

BackendKind current_backend_kind() {
  return g_override >= 0 ? static_cast<BackendKind>(g_override) : g_default;
}
Backend& backend() {
  // One relaxed load when no kernel observer is installed (kernel_observer.h).
  if (kernel_observers_on()) [[unlikely]] {
    const BackendKind k = current_backend_kind();
    return detail::observed_backend(get_backend(k), k);
  }
  return get_backend(current_backend_kind());
}
Backend& backend_for(Device device) {
  switch (device.kind) {
    case DeviceKind::cpu:
      return backend();
    case DeviceKind::guarded:
      return detail::guarded_backend();
    case DeviceKind::cuda:
      return detail::cuda_backend(device.index);
  }
  throw std::invalid_argument("mixp: no backend for device " + device.str());
}

namespace {
[[noreturn]] void mixed_devices(Device a, Device b) {
  throw std::invalid_argument(fmt::format(
      "mixp: tensors on different devices ({} and {}) in one operation; move them to one device "
      "with to(Device) first",
      a.str(), b.str()));
}
}  // namespace

Device common_device(std::initializer_list<const Tensor*> tensors) {
  bool found = false;
  Device d;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!found) {
      d = t->device();
      found = true;
    } else if (!(t->device() == d)) [[unlikely]] {
      mixed_devices(d, t->device());
    }
  }
  return found ? d : default_device();
}
Device common_device(std::span<const Tensor> tensors) {
  bool found = false;
  Device d;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!found) {
      d = t.device();
      found = true;
    } else if (!(t.device() == d)) [[unlikely]] {
      mixed_devices(d, t.device());
    }
  }
  return found ? d : default_device();
}

void set_default_backend(BackendKind kind) {
  g_default = kind;
}
const char* to_string(BackendKind kind) {
  return kind == BackendKind::ref ? "ref" : "cpu";
}

BackendGuard::BackendGuard(BackendKind kind) : prev_(g_override) {
  g_override = static_cast<int>(kind);
}
BackendGuard::~BackendGuard() {
  g_override = prev_;
}

void set_num_threads(int n) {
  if (n < 1)
    throw std::invalid_argument("mixp::set_num_threads: need at least 1 thread, got " +
                                std::to_string(n));
  // oneDNN is built on the same OpenMP runtime (libgomp) and reads omp_get_max_threads() per call.
  omp_set_num_threads(n);
}
int get_num_threads() {
  return omp_get_max_threads();
}

}  // namespace mixp
