// The scalar reference backend (internal header): every kernel of backend.h with plain loops over
// arbitrary strides, templated over float/double, accumulating in double. It is the oracle the
// tests compare the cpu backend against, and the fallback of CpuBackend for layouts it does not
// specialize. Obviously correct beats fast here.
#pragma once
#include <cstdint>

#include "mixp/backend/backend.h"

namespace mixp {

// How many RefBackend kernels have run in this process (every RefBackend method counts itself on
// entry; ref_kernel_count.cpp). The cpu-vs-ref tests read it around the cpu run: a CpuBackend op
// that silently falls back to (or never overrides) the reference kernel would otherwise compare
// the oracle with itself and pass whatever the cpu kernel does (tests/ops/op_test_util.h).
uint64_t ref_kernel_calls();
const char* last_ref_kernel();  // the name of the RefBackend method that counted itself last
void count_ref_kernel(const char* name);

class RefBackend : public Backend {
 public:
  const char* name() const override { return "ref"; }
  // The kernels whose ref column is 1 in the kernel table (all but layer_norm_backward_xhat,
  // whose Backend default serves): ref_*.cpp. The binary cross entropy, FP8 scale update and
  // non-finite count are the only implementation (the cpu backend inherits them: ref_bce.cpp,
  // ref_stats.cpp).
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  MIXP_KT_IF(ref, void name params override;)
#include "mixp/backend/kernels.def"
};

}  // namespace mixp
