// Precision policies: what a training recipe stores, computes and scales in, as data.
//
// A PrecisionPolicy is what `mixp train --precision` names (docs/architecture.md 3.6, recipes). The
// named recipes are presets; a jmp-style policy string refines one:
//
//   --precision bf16                                           a preset
//   --precision "bf16:params=fp32,compute=bf16,output=fp32"    a preset refined by keys
//   --precision "params=fp32,compute=bf16,output=fp32"         keys alone refine fp32 (O0)
//
// Keys (jmp's three first; dtype spellings: fp32/f32/float32/full, bf16/bfloat16, fp16/f16/
// float16/half, fp64/f64/float64, tf32):
//   params=fp64|fp32|bf16|fp16   dtype the parameters are stored in
//   compute=fp64|fp32|tf32|bf16|fp16
//                                dtype the GEMMs run in (tf32: fp32 storage, TF32 GEMM inputs)
//   output=fp64|fp32|bf16|fp16   dtype of the model output handed to the loss
//   autocast=on|off              bf16/fp16 compute through Autocast (each op in the dtype of the
//                                cast policy: GEMMs low, softmax/norms/losses fp32) or "pure"
//                                (every op in its inputs' dtype). Default: on unless params are
//                                already the compute dtype (and no norm layer is kept in fp32)
//   master=on|off                fp32 master copies of 16-bit parameters
//   rounding=nearest|stochastic  rounding of the update written back to 16-bit parameters
//   kahan=on|off                 Kahan-compensated write-back (needs master=off)
//   states=fp32|bf16             dtype of the optimizer states (Adam's m and v)
//   norm=fp32|params             BatchNorm parameters and statistics in fp32 (Apex O2's
//                                keep_batchnorm_fp32) or in the parameters' dtype
//   ln_save=compute|fp32         what LayerNorm keeps for backward under Autocast: its normalized
//                                input in the compute dtype (default; half the bytes of the fp32
//                                residual stream it would otherwise keep) or its fp32 input
//                                (PyTorch's behaviour). Autocast's low_precision_norm_saves
//   loss_scale=dynamic|none|X    dynamic loss scaling (GradScaler), none, or a fixed scale X.
//                                Default: dynamic when fp16 is stored or computed anywhere
//                                (per-layer rules included), none otherwise
//   loss_scale_init=X  growth_interval=N   the GradScaler's initial scale and growth interval
//   loss_scale_min=X  loss_scale_max=X  collapse_after=N
//                                the GradScaler's floor (default 1), cap (default none: fp32's
//                                range) and the skipped steps at the floor that stop the run
//                                (default 20; 0 = never)
//
// The presets are the rows of policy_presets() (src/amp/policy.cpp), each with its one-line
// description (Apex's opt levels O0-O3 among them); docs/amp-training.md's recipe table shows
// them. `auto` is the precision `mixp doctor` recommends for the CPU training runs on (bf16 with
// AVX512_BF16 or AMX-BF16, else fp32; recommend_precision of backend/platform.h).
//
// Per-layer rules (`--layer-precision embed=fp32,attn=bf16,mlp=bf16,head=fp32`) name modules by
// kind (nn/module.h: embedding, attention, mlp, block, linear, conv2d, layer_norm, batch_norm2d,
// head, ...; aliases embed, attn, norm (both norms), ln, bn, conv) or by dotted name (fc1,
// blocks.0, blocks.0.attn), and give each a dtype: fp32, bf16 or fp16. See layer_precision.h.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"

namespace mixp::amp {

// A policy string, preset name or layer rule that cannot be used; the message names the
// alternatives. Derives from std::invalid_argument (the caller's mistake).
class PolicyError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class LossScaling : uint8_t { none, dynamic, fixed };

struct PrecisionPolicy {
  std::string name = "fp32";  // canonical: preset, or "preset:key=value,..." as given
  DType params = DType::fp32;
  DType compute = DType::fp32;
  DType output = DType::fp32;
  bool autocast = false;
  bool master_weights = true;
  Round rounding = Round::nearest_even;
  bool kahan = false;
  DType states = DType::fp32;
  bool norm_fp32 = false;
  bool norm_saves_low = true;  // ln_save=compute; only used with autocast
  LossScaling loss_scaling = LossScaling::none;
  double loss_scale = 65536.0;  // dynamic: initial scale; fixed: the scale
  int64_t growth_interval = 2000;
  double loss_scale_min = 1.0;  // dynamic: floor (0 = none, PyTorch)
  double loss_scale_max = 0.0;  // dynamic: cap (0 = fp32's range only, PyTorch)
  int64_t collapse_after = 20;  // dynamic: skipped steps at the floor before an error (0 = never)

  // "mixed" (Autocast), "pure" (16-bit params and activations, no Autocast) or "full" (one
  // 32/64-bit dtype, tf32 included).
  std::string_view mode() const;
  bool uses_fp16() const { return params == DType::fp16 || compute == DType::fp16; }
  // One line: "params fp32, compute bf16 (autocast), output fp32, no loss scaling".
  std::string describe() const;
};

// A named policy preset: the one definition of a policy recipe (docs/architecture.md 8). The
// recipe registry (train/recipe_registry.h) has one entry per preset, built from it: the name,
// the description, the formats of each role and the loss scaling all come from here.
struct PolicyPreset {
  PrecisionPolicy policy;        // policy.name is the recipe name
  std::string_view description;  // one line: what it is and when to use it (the recipe table
                                 // of docs/amp-training.md)
};

// The presets, in the order of docs/architecture.md 3.6 (the registry lists them first, in this
// order); `auto` is not one (it resolves to one of them).
std::span<const PolicyPreset> policy_presets();

// The preset names of policy_presets(), then `auto`. The training recipes around them (every
// recipe name, FP8 and int8-qat included) are train::recipe_registry()'s.
const std::vector<std::string>& preset_names();
// The keys a policy string accepts, in the order of the list above.
const std::vector<std::string>& policy_keys();

// The policy of the preset of that exact (lower-case) name, nullptr when there is none.
const PrecisionPolicy* find_preset(std::string_view name);

// The preset `auto` resolves to on this machine (bf16 or fp32).
std::string auto_preset();

// Parses a preset name or policy string (see the header comment); the preset name is matched in
// any case. `auto` resolves to auto_preset(). Throws PolicyError: unknown preset (naming the
// presets), unknown key (naming the keys), bad value (naming the accepted ones), or a combination
// that cannot work (e.g. kahan=on with master=on).
PrecisionPolicy parse_policy(std::string_view spec);

// Parses a dtype name as the policy strings spell it; nullopt when unknown.
std::optional<DType> parse_policy_dtype(std::string_view s);

}  // namespace mixp::amp
