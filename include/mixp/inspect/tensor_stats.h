// Statistics of one tensor, and what each low-precision format would do to it
// (docs/inspect.md, "What the statistics mean"). The rounding is mixp's own bit-exact codecs
// (mixp/format/float_codec.h, block_mx.h, block_int8.h), so a fraction here is exactly the
// fraction of values that a cast to the format overflows or flushes.
//
// Values are read as fp32 (bf16/fp16 widen exactly). Over the finite values:
//   amax         max |x|
//   amin_nz      min |x| over x != 0 (0 when every value is 0)
//   dynamic_range log2(amax / amin_nz) (0 when every value is 0)
//   rms          sqrt(mean x^2)
// and nan / inf count the non-finite values. Per format, over all numel values (a non-finite x
// counts in none of them):
//   overflow    x rounds (nearest-even, IEEE overflow) to inf or NaN
//   underflow   x != 0 rounds to zero (flushes)
//   subnormal   x rounds to a nonzero subnormal of the format
//   mse         mean over the finite x of (q(x) - x)^2, q rounding nearest-even with saturation
//               (so one overflow gives a large error, not inf)
// Formats:
//   fp16, bf16, fp8_e4m3, fp8_e5m2  element-wise casts
//   mxfp8       OCP MXFP8 E4M3, blocks of 32 along the last dimension with an e8m0 scale;
//               overflow: the scaled value would round beyond 448 (the spec saturates it),
//               subnormal: the scaled value is below E4M3's min normal 2^-6
//   int8        per-tensor symmetric qint8 at its own scale max|x| / 127.5 (PyTorch's observer,
//               block_int8.h); overflow: clamped to [-128, 127]; no subnormals
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::inspect {

enum class StatFormat : uint8_t { fp16, bf16, fp8_e4m3, fp8_e5m2, mxfp8, int8 };
const char* to_string(StatFormat f);
std::optional<StatFormat> parse_stat_format(std::string_view name);
// Every format, in the order above.
std::span<const StatFormat> all_stat_formats();

struct FormatStats {
  StatFormat format = StatFormat::fp16;
  int64_t overflow = 0;
  int64_t underflow = 0;
  int64_t subnormal = 0;
  double mse = 0;
};

struct TensorStats {
  int64_t numel = 0;
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t zeros = 0;
  double amax = 0;
  double amin_nz = 0;
  double dynamic_range = 0;  // log2(amax / amin_nz)
  double rms = 0;
  std::vector<FormatStats> formats;
  // Fractions of numel.
  double fraction(int64_t count) const { return numel > 0 ? double(count) / double(numel) : 0; }
};

// Statistics of `x` read as rows of `row_len` values (MX blocks run along rows).
TensorStats tensor_stats(std::span<const float> x, int64_t row_len,
                         std::span<const StatFormat> formats);
// The same for a tensor of any floating dtype (blocks along its last dimension), multiplied by
// `scale` first (gradients counted at a loss scale); throws std::invalid_argument for a
// non-floating tensor.
TensorStats tensor_stats(const Tensor& t, std::span<const StatFormat> formats, double scale = 1.0);

// The values of a floating tensor as contiguous fp32, times `scale` (rounded once to fp32).
std::vector<float> values_as_fp32(const Tensor& t, double scale = 1.0);

}  // namespace mixp::inspect
