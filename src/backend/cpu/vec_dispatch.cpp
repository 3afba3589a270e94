#include "backend/cpu/vec_kernels.h"
#include "mixp/format/cpu_features.h"

namespace mixp::vec {
const Kernels& kernels() {
  // The getters, not their tables: only the chosen tier's code may run on this CPU.
  static const Kernels* k = &by_tier(&kernels_avx512, &kernels_avx2, &kernels_generic)();
  return *k;
}
}  // namespace mixp::vec
