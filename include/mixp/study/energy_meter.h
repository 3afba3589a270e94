// The study's RAPL meter is the Trainer's: one implementation with one rule (which RAPL domains,
// wraparound, what "unavailable" means), in train/energy_meter.h, the lower layer.
#pragma once
#include "mixp/train/energy_meter.h"

namespace mixp::study {

using RaplEnergyMeter = train::EnergyMeter;
using train::counter_delta;

}  // namespace mixp::study
