// See include/mixp/format/recipe_facts.h. Every number comes from the element and scale formats'
// own facts (describe.h), so the table cannot drift from the codecs.
#include "mixp/format/recipe_facts.h"

#include <algorithm>

#include "mixp/format/describe.h"

namespace mixp {

std::vector<BlockScaledFacts> block_scaled_facts() {
  const FormatFacts e2m1 = format_facts(DType::fp4_e2m1), e4m3 = format_facts(DType::fp8_e4m3),
                    e8m0 = format_facts(DType::e8m0), f32 = format_facts(DType::fp32);
  std::vector<BlockScaledFacts> out;
  const auto add = [&](BlockScheme s, int tr, const FormatFacts& el, const FormatFacts& scale,
                       std::string_view scale_name, double scale_bits) {
    BlockScaledFacts f;
    f.name = std::string(to_string(s));
    f.scheme = s;
    f.tile_rows = tr;
    f.tile_cols = block_scaled_tile_cols(s);
    f.element = el.format;
    f.block_scale = scale_name;
    f.tensor_scale = s == BlockScheme::nvfp4 ? "fp32 (amax / 2688)" : "none";
    f.bits_per_value = el.bits + scale_bits / (tr * f.tile_cols);
    f.block_dynamic_range = el.max_finite / el.min_positive;
    f.relative_to_amax = s == BlockScheme::nvfp4;
    if (f.relative_to_amax) {
      // x = e2m1 * s * amax / (448 * 6): the largest is the amax, the smallest positive the
      // smallest E2M1 value times the smallest (subnormal) E4M3 scale.
      const double unit = 1.0 / (e4m3.max_finite * e2m1.max_finite);
      f.max_value = 1.0;
      f.min_positive = e2m1.min_positive * e4m3.min_positive * unit;
    } else if (scale.format == DType::fp32) {
      // fp8-block: scale = 448 / amax is clamped to FLT_MAX, so the decoding scale 1 / scale is
      // at least 1 / FLT_MAX; the decoded values are fp32, so at most FLT_MAX.
      f.max_value = f32.max_finite;
      f.min_positive = el.min_positive / f32.max_finite;
    } else {
      // mxfp4: 2^-127 <= scale <= 2^127, decoded to fp32 (an fp32 amax needs a scale <= 2^126).
      f.max_value = std::min(el.max_finite * scale.max_finite, f32.max_finite);
      f.min_positive = el.min_positive * scale.min_positive;
    }
    f.tensor_dynamic_range = f.max_value / f.min_positive;
    out.push_back(std::move(f));
  };
  add(BlockScheme::nvfp4, 1, e2m1, e4m3, "fp8_e4m3", 8);
  add(BlockScheme::nvfp4, 16, e2m1, e4m3, "fp8_e4m3", 8);
  add(BlockScheme::mxfp4, 1, e2m1, e8m0, "e8m0", 8);
  add(BlockScheme::fp8_block, 1, e4m3, f32, "fp32", 32);
  add(BlockScheme::fp8_block, 128, e4m3, f32, "fp32", 32);
  return out;
}

}  // namespace mixp
