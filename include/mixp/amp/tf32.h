// TF32 / fp32 GEMM precision (the settings live in the ops layer, which reads them; this header
// is where amp users look for them). See mixp/ops/matmul_precision.h.
#pragma once
#include "mixp/ops/matmul_precision.h"
