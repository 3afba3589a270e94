// The tiers of the quant module's elementwise kernels (internal); the table and its arithmetic
// are documented in include/mixp/backend/quant_kernels.h, the interface quant calls.
#pragma once
#include "mixp/backend/quant_kernels.h"

namespace mixp::cpu::qk {

using mixp::qk::Kernels;
using mixp::qk::kernels;
using mixp::qk::QP;

const Kernels& kernels_generic();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace mixp::cpu::qk
