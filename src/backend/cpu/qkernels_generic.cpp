// The baseline tier of the quant kernels (see qkernels.h).
#define MIXP_QK_NS generic
#define MIXP_QK_TIER_NAME "generic"
#include "mixp/format/cpu_features.h"
#include "backend/cpu/qkernels.inc"

namespace mixp::qk {
const Kernels& kernels() {
  // The getters, not their tables: only the chosen tier's code may run on this CPU.
  static const Kernels* k =
      &by_tier(&cpu::qk::kernels_avx512, &cpu::qk::kernels_avx2, &cpu::qk::kernels_generic)();
  return *k;
}
}  // namespace mixp::qk

namespace mixp::cpu::qk {
const Kernels& kernels_generic() {
  return generic::table();
}
}  // namespace mixp::cpu::qk
