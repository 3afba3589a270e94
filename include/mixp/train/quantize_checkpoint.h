// `mixp quantize`: post-training static quantization of a checkpoint (docs/quantization.md).
//
//   1. rebuild the checkpoint's model and load its weights; evaluate it (accuracy before);
//   2. quant::prepare_ptq (default_ptq_qconfig: min-max activation observers, per-channel weight
//      observers, fake quantization off, eval mode: batch norm uses its running statistics);
//   3. run `calibrate` training batches through it without gradients (the observers record);
//   4. quant::convert_to_int8 and evaluate the int8 model (accuracy after);
//   5. with `out`: write a checkpoint folder (atomically) holding int8_model.safetensors and a
//      state.json (the source's, with "int8": {"method": "ptq", "calibration_batches": N,
//      "source": DIR}) that `mixp eval --checkpoint OUT` runs.
// calibrate 0 leaves the observers empty and fails at step 4 with convert's
// "convert needs calibrated observers ..." error (ConfigError).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "mixp/train/trainer.h"

namespace mixp::train {

struct QuantizeOptions {
  int64_t calibrate = 0;      // training batches for calibration
  std::filesystem::path out;  // "" = do not write
  std::string data;           // "" = the checkpoint's
  bool evaluate_fp = true;    // evaluate the source model too
};

struct QuantizeResult {
  std::string model, source_precision;
  int64_t calibration_batches = 0, calibration_samples = 0;
  EvalResult before;  // the source model (when evaluate_fp)
  EvalResult after;   // the int8 model
  int64_t int8_weight_bytes = 0, source_weight_bytes = 0;
  double calibrate_time_s = 0;
};

QuantizeResult quantize_checkpoint(const std::filesystem::path& dir, const QuantizeOptions& opt);

}  // namespace mixp::train
