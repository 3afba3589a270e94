// The recipe registry (see mixp/train/recipe_registry.h): the one table of recipe names.
#include "mixp/train/recipe_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "mixp/amp/policy.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"
#include "util/key_value.h"
#include "util/text.h"

namespace mixp::train {

namespace {

using D = DType;
using detail::make_int8_qat_recipe;
using detail::make_policy_recipe;

// params, master, compute, grads, states, activations.
constexpr RecipeDtypes dtypes(D params, D master, D compute, D states, D activations) {
  return {params, master, compute, /*grads=*/master, states, activations};
}
constexpr RecipeDtypes kFp32 = dtypes(D::fp32, D::fp32, D::fp32, D::fp32, D::fp32);
// The FP8 recipes: the bf16 recipe with the Linear layers' GEMMs in FP8 (E4M3 forward).
constexpr RecipeDtypes kFp8 = dtypes(D::fp32, D::fp32, D::fp8_e4m3, D::fp32, D::bf16);
// qlora-nf4, qlora-int4: the bf16 recipe's formats for what trains (the adapters) and for the
// unquantized rest; the frozen base Linear weights are 4-bit (quant/qlora.h), outside this table.
constexpr RecipeDtypes kQlora = dtypes(D::fp32, D::fp32, D::bf16, D::fp32, D::bf16);
// nvfp4, mxfp4: the same with E2M1 GEMM operands.
constexpr RecipeDtypes kFp4 = dtypes(D::fp32, D::fp32, D::fp4_e2m1, D::fp32, D::bf16);

// The language models (the QAT recipes build int8 inference models of Linear/Conv2d layers).
constexpr std::string_view kNotGpt[] = {"gpt",        "gpt2",        "gpt2-medium",    "llama",
                                        "llama-tiny", "smollm-135m", "tinyllama-1.1b", "llama2-7b"};

// An FP8 or FP4 recipe whose scaling starts from amp's preset `kScaling` (amp/fp8_scaling.h).
template <amp::Fp8Recipe (*kScaling)()>
std::unique_ptr<PrecisionRecipe> make_fp8(std::string_view spec, const RecipeOptions& opt) {
  return detail::make_fp8_recipe(spec, opt, kScaling());
}

// `mixp compare`'s default list, in the seeds' order (RecipeTraits::study_order is the place in
// it): a recipe joins the default study here, whichever file defines it.
constexpr std::string_view kStudyDefault[] = {"fp32",      "tf32", "bf16",    "fp16",
                                              "bf16-pure", "fp8",  "int8-qat"};

// A recipe whose accuracy is the trained model's, trained on any built-in model.
constexpr RecipeTraits entry(std::string_view name, std::string_view description,
                             RecipeFamily family, std::optional<RecipeDtypes> d, bool loss_scaling,
                             std::unique_ptr<PrecisionRecipe> (*make)(std::string_view,
                                                                      const RecipeOptions&)) {
  return {.name = name,
          .description = description,
          .family = family,
          .dtypes = d,
          .loss_scaling = loss_scaling,
          .unsupported_models = {},
          .models_note = {},
          .accuracy = ReportedModel::trained,
          .accuracy_note = "the trained model",
          .study_order = 0,
          .make = make};
}

// The entry of an amp policy preset (amp::policy_presets, src/amp/policy.cpp, the one definition
// of what "bf16" means): its name, description, formats and loss scaling all come from there.
RecipeTraits policy_entry(const amp::PolicyPreset& preset) {
  const amp::PrecisionPolicy& p = preset.policy;
  return entry(p.name, preset.description, RecipeFamily::policy, detail::policy_dtypes(p),
               p.loss_scaling == amp::LossScaling::dynamic, make_policy_recipe);
}

// A low-bit QAT recipe (recipe_lowbit_qat.cpp): mlp and cnn, accuracy of the packed model.
constexpr RecipeTraits lowbit(std::string_view name, std::string_view description) {
  return {.name = name,
          .description = description,
          .family = RecipeFamily::lowbit_qat,
          .dtypes = kFp32,  // fake quantization: the GEMMs run in fp32 on integer codes
          .loss_scaling = false,
          .unsupported_models = kNotGpt,
          .models_note =
              "its low-bit layers (quant::prepare_lowbit_qat) cover a Sequential of "
              "Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d layers: the mlp and the cnn",
          .accuracy = ReportedModel::converted_packed,
          .accuracy_note = "packed low-bit model converted after training",
          .study_order = 0,
          .make = detail::make_lowbit_qat_recipe};
}

constexpr RecipeFamily kFp8Family = RecipeFamily::fp8;

// The entries other than the policy presets, in the order of docs/architecture.md 3.6 after them.
constexpr RecipeTraits kOtherRecipes[] = {
    entry("fp8",
          "TransformerEngine's delayed-scaling recipe: Linear layers in FP8 (E4M3 forward, E5M2 "
          "gradients, per-tensor scales from a 16-step amax history; fp8:preset=te for TE's "
          "1024), the rest as bf16, no loss scaling",
          kFp8Family, kFp8, false, make_fp8<amp::Fp8Recipe::delayed>),
    entry("fp8-current", "as fp8, each tensor scaled from its own amax (TE's Float8CurrentScaling)",
          kFp8Family, kFp8, false, make_fp8<amp::Fp8Recipe::current>),
    entry("mxfp8",
          "Linear layers in MXFP8 (E4M3, blocks of 32 with e8m0 scales), the rest as bf16 (TE's "
          "MXFP8BlockScaling, Blackwell)",
          kFp8Family, kFp8, false, make_fp8<amp::Fp8Recipe::mxfp8>),
    entry("fp8-block",
          "DeepSeek-V3 / TE Float8BlockScaling, emulated: Linear layers in E4M3 with 1x128 "
          "activation and gradient tiles and 128x128 weight blocks, fp32 scales "
          "(fp8-block:pow2=1 for powers of two; promote=128 emulates the 14-bit accumulator), "
          "the rest as bf16 (docs/fp8.md)",
          kFp8Family, kFp8, false, make_fp8<amp::Fp8Recipe::fp8_block>),
    entry("nvfp4",
          "NVIDIA's NVFP4 recipe / TE NVFP4BlockScaling, emulated: Linear layers in E2M1 with "
          "E4M3 scales per 16 and an fp32 tensor scale, 16x16 weight tiles, RHT on the wgrad "
          "operands, stochastic rounding of gradients (switches rht, 2d, sr, and bf16_last=N "
          "for the paper's last blocks in bf16; docs/fp4.md)",
          kFp8Family, kFp4, false, make_fp8<amp::Fp8Recipe::nvfp4>),
    entry("mxfp4",
          "MXFP4 training (OCP E2M1, E8M0 scales per 32; Tseng et al. / Quartet backward: RHT "
          "and stochastic rounding), emulated; switches rht, sr, bf16_last (docs/fp4.md)",
          kFp8Family, kFp4, false, make_fp8<amp::Fp8Recipe::mxfp4>),
    {.name = "int8-qat",
     .description = "fp32 training with fake quantization of weights (per channel) and "
                    "activations (per tensor), converted to an int8 model at the end "
                    "(docs/quantization.md)",
     .family = RecipeFamily::int8_qat,
     .dtypes = kFp32,  // fake quantization: the GEMMs run in fp32 on quantized values
     .loss_scaling = false,
     .unsupported_models = kNotGpt,
     .models_note = "its fake-quantization wrappers (quant::prepare_qat) cover a Sequential of "
                    "Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d layers: the mlp and the cnn",
     .accuracy = ReportedModel::converted_int8,
     .accuracy_note = "int8 model converted after training",
     .study_order = 0,
     .make = make_int8_qat_recipe},
    lowbit("int4-qat",
           "fp32 latent weights trained through 4-bit weights (per channel) and 4-bit "
           "activations (per tensor), first and last layers int8; packed to 4-bit codes at the "
           "end (docs/quantization.md, \"Below 8 bits\")"),
    lowbit("int2-qat",
           "as int4-qat with 2-bit weights and activations: 1/16 of the fp32 weight bytes"),
    lowbit("ternary",
           "TWN weights {-a, 0, +a} (threshold 0.7 mean|w| per layer) with 8-bit activations, "
           "packed as two bit-planes"),
    lowbit("binary",
           "binary weights {-a, +a} (a = mean|w| per output channel) with 8-bit activations, "
           "bit-packed: 1/32 of the fp32 weight bytes"),
    lowbit("binary-act",
           "binary weights and sign activations (XNOR-Net; STE clipped at |x| <= 1): the "
           "packed model runs XNOR + popcount"),
    entry("qlora-nf4",
          "QLoRA (Dettmers et al. 2023): the frozen base Linear layers in NF4 with double "
          "quantization, dequantized to bf16 for each GEMM; LoRA adapters (--lora, required) "
          "with fp32 masters under bf16 autocast; head, embeddings and norms unquantized "
          "(docs/lora.md)",
          RecipeFamily::qlora, kQlora, false, detail::make_qlora_recipe),
    entry("qlora-int4",
          "as qlora-nf4 with symmetric int4 codes (absmax / 7) instead of the NF4 code book",
          RecipeFamily::qlora, kQlora, false, detail::make_qlora_recipe),
    entry("auto",
          "what `mixp doctor` recommends for this CPU: bf16 with AVX512_BF16 or AMX-BF16, else "
          "fp32",
          RecipeFamily::automatic, std::nullopt, false, make_policy_recipe),
};

// A function-local table: the policy entries read amp's presets, so it is built on first use and
// no other file's static initialiser can see it half-made.
std::span<const RecipeTraits> registry() {
  static const std::vector<RecipeTraits> kRegistry = [] {
    std::vector<RecipeTraits> rows;
    for (const amp::PolicyPreset& p : amp::policy_presets()) rows.push_back(policy_entry(p));
    rows.insert(rows.end(), std::begin(kOtherRecipes), std::end(kOtherRecipes));
    for (size_t i = 0; i < std::size(kStudyDefault); ++i) {
      auto it = std::find_if(rows.begin(), rows.end(),
                             [&](const RecipeTraits& t) { return t.name == kStudyDefault[i]; });
      if (it == rows.end())
        throw std::logic_error(fmt::format("study recipe '{}' is not a recipe", kStudyDefault[i]));
      it->study_order = static_cast<int>(i) + 1;
    }
    return rows;
  }();
  return kRegistry;
}

std::string dtype_cell(const std::optional<RecipeDtypes>& d, DType RecipeDtypes::*role) {
  return d ? std::string(mixp::name((*d).*role)) : "as picked";
}

}  // namespace

bool RecipeTraits::supports_model(std::string_view model) const {
  return std::find(unsupported_models.begin(), unsupported_models.end(), model) ==
         unsupported_models.end();
}

std::span<const RecipeTraits> recipe_registry() {
  return registry();
}

const RecipeTraits* find_recipe(std::string_view spec) {
  const ::mixp::detail::SpecParts parts = ::mixp::detail::split_spec(spec);
  // Keys alone refine fp32, as amp::parse_policy does.
  const std::string base = !parts.has_colon && !parts.options.empty()
                               ? std::string("fp32")
                               : ::mixp::detail::lower(parts.base);
  for (const RecipeTraits& t : registry())
    if (t.name == base) return &t;
  return nullptr;
}

const RecipeTraits& recipe_traits(std::string_view spec) {
  if (const RecipeTraits* t = find_recipe(spec)) return *t;
  throw ConfigError(
      fmt::format("unknown precision '{}'; available: {}, or a policy string such as "
                  "'bf16:params=fp32,compute=bf16,output=fp32' (docs/amp-training.md)",
                  ::mixp::detail::split_spec(spec).base, ::mixp::detail::join(recipe_names())));
}

bool is_recipe_family(std::string_view spec, RecipeFamily family) {
  const RecipeTraits* t = find_recipe(spec);
  return t && t->family == family;
}

std::vector<std::string> recipe_names(const RecipeFilter& f) {
  std::vector<std::string> out;
  for (const RecipeTraits& t : registry()) {
    if (!f.model.empty() && !t.supports_model(f.model)) continue;
    if (f.study_default && t.study_order == 0) continue;
    if (!f.with_auto && t.family == RecipeFamily::automatic) continue;
    out.emplace_back(t.name);
  }
  if (f.study_default) {
    std::stable_sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
      return find_recipe(a)->study_order < find_recipe(b)->study_order;
    });
  }
  return out;
}

std::string recipe_table_markdown() {
  std::string s =
      "| `--precision` | parameters | master | compute | gradients | optimizer states | "
      "activations | loss scaling | models | accuracy of | what it is |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RecipeTraits& t : registry()) {
    std::vector<std::string> not_for(t.unsupported_models.begin(), t.unsupported_models.end());
    s += fmt::format(
        "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", t.name,
        dtype_cell(t.dtypes, &RecipeDtypes::params), dtype_cell(t.dtypes, &RecipeDtypes::master),
        dtype_cell(t.dtypes, &RecipeDtypes::compute), dtype_cell(t.dtypes, &RecipeDtypes::grads),
        dtype_cell(t.dtypes, &RecipeDtypes::states),
        dtype_cell(t.dtypes, &RecipeDtypes::activations), t.loss_scaling ? "dynamic" : "no",
        not_for.empty() ? std::string("all") : "not " + ::mixp::detail::join(not_for),
        t.accuracy_note, t.description);
  }
  return s;
}

}  // namespace mixp::train
