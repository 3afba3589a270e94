// Umbrella for the quant module (docs/architecture.md 3.8, quant; docs/quantization.md): observers,
// fake quantization, QAT/PTQ prepare, int8 inference, weight-only int4/NF4, QLoRA's 4-bit base.
#pragma once
#include "mixp/quant/fake_quantize.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/lowbit.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/observer.h"
#include "mixp/quant/qat.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/quant/qlora.h"
#include "mixp/quant/weight_only.h"
