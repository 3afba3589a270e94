#include "tensor_bytes.h"

#include <fmt/format.h>

#include <cstring>

#include "mixp/train/train_config.h"

namespace mixp::train::detail {

namespace {

bool is_float(DType d) {
  return traits(d).is_float();
}

struct NonFinite {
  int64_t first = -1;
  int64_t count = 0;
};

// NaNs and infinities among the stored elements, by their bits: an all-ones exponent (IEEE
// formats), or S.1111.111 (OCP E4M3, which has no infinity).
template <class U>
NonFinite scan(const SafeTensor& s, U mask) {
  NonFinite r;
  const size_t n = s.data.size() / sizeof(U);
  for (size_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, s.data.data() + i * sizeof(U), sizeof(U));
    if ((v & mask) == mask) {
      if (r.first < 0) r.first = int64_t(i);
      ++r.count;
    }
  }
  return r;
}

NonFinite nonfinite(const SafeTensor& s) {
  switch (s.dtype) {
    case DType::fp64:
      return scan<uint64_t>(s, 0x7FF0000000000000ull);
    case DType::fp32:
      return scan<uint32_t>(s, 0x7F800000u);
    case DType::fp16:
      return scan<uint16_t>(s, 0x7C00);
    case DType::bf16:
      return scan<uint16_t>(s, 0x7F80);
    case DType::fp8_e5m2:
      return scan<uint8_t>(s, 0x7C);
    case DType::fp8_e4m3:
      return scan<uint8_t>(s, 0x7F);
    default:
      return {};
  }
}

}  // namespace

void check_loaded_tensor(const Tensor& t, const SafeTensor& s, std::string_view source,
                         std::string_view what) {
  const bool want_float = is_float(t.dtype());
  if (want_float != is_float(s.dtype)) {
    throw TrainError(fmt::format(
        "{}: {} '{}' is stored as {} but the model's is {}: a {} value cannot come from a {} "
        "tensor; the checkpoint is damaged or belongs to something else",
        source, what, s.name, traits(s.dtype).safetensors, traits(t.dtype()).name,
        want_float ? "floating-point" : "integer", want_float ? "non-floating" : "floating-point"));
  }
  if (const NonFinite nf = nonfinite(s); nf.count > 0) {
    const int64_t i = nf.first, count = nf.count;
    throw TrainError(fmt::format(
        "{}: {} '{}' holds {} NaN or infinite value{} (the first at element {}); the checkpoint "
        "is damaged (a corrupted file, or it was saved from a run that had already diverged), so "
        "it is refused: save it again from a healthy run, or restore it from a copy",
        source, what, s.name, count, count == 1 ? "" : "s", i));
  }
}

}  // namespace mixp::train::detail
