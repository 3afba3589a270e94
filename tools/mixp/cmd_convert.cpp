// `mixp convert`: re-encode every floating tensor of a .safetensors file into one format. The
// work is mixp::convert_safetensors (include/mixp/io/convert_safetensors.h); the file is written
// atomically, so a failure leaves no output file (and an existing one unchanged). --layout moves
// GPT-2 weights between layouts (nn/gpt2_weights.h) and exports a LLaMA-family checkpoint folder
// to a Hugging Face directory (train/export_hf.h).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "block_tile_flag.h"
#include "command.h"
#include "flag_range.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/manifest.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/export_hf.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct ConvertArgs {
  std::string input, output, to, round = "nearest-even", layout, tile, scale_mode;
  std::string shard_size, lora_from;  // --layout hf of a llama checkpoint folder
  int64_t heads = 0;
  uint64_t seed = 0;
  bool saturate = false, json = false, pow2_scales = false;
  int block = 0;
  bool block_given = false;  // --block was on the command line
};

// --tile of --to nvfp4 or fp8-block (block_tile_flag.h): the rows of a tile.
int parse_tile(const std::string& tile, const std::string& to) {
  const ConvertTarget t = resolve_convert_target(to);
  if (!t.block_scaled) throw UsageError("--tile applies to --to nvfp4 and fp8-block");
  return parse_block_tile(tile, t.name == "nvfp4" ? BlockScheme::nvfp4 : BlockScheme::fp8_block);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// --layout: GPT-2 weights between the mixp, Hugging Face and llm.c layouts (nn/gpt2_weights.h).
void run_layout(const ConvertArgs& a, bool round_given) {
  nn::Gpt2Layout layout;
  std::optional<DType> dtype;
  try {
    layout = nn::parse_gpt2_layout(a.layout);
    if (!a.to.empty()) {
      const DType d = parse_dtype(a.to);
      if (d != DType::fp32 && d != DType::bf16 && d != DType::fp16) {
        throw std::invalid_argument("with --layout, --to is the storage dtype: fp32, bf16 or fp16");
      }
      dtype = d;
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (a.block_given || a.saturate || round_given || !a.tile.empty() || a.pow2_scales ||
      !a.scale_mode.empty()) {
    throw UsageError(
        "--layout converts GPT-2 weights; --block, --saturate, --round, --tile, --pow2-scales "
        "and --scale-mode do not apply");
  }
  if (a.heads < 0) throw UsageError("--heads must be positive");
  const nn::Gpt2Layout from = nn::detect_gpt2_layout(a.input);
  const nn::Gpt2Weights w = nn::read_gpt2_weights(a.input, a.heads);
  nn::write_gpt2_weights(w, a.output, layout, dtype);
  const nn::GptConfig& c = w.config;
  if (a.json) {
    print_json({{"input", a.input},
                {"output", a.output},
                {"from_layout", std::string(nn::to_string(from))},
                {"layout", std::string(nn::to_string(layout))},
                {"dtype", dtype ? std::string(name(*dtype)) : std::string("kept")},
                {"vocab", c.vocab},
                {"context", c.context},
                {"width", c.width},
                {"layers", c.layers},
                {"heads", c.heads},
                {"tensors", w.tensors.tensors.size()}});
    return;
  }
  std::cout << "read " << a.input << " (" << nn::to_string(from) << " layout): GPT-2 vocab "
            << c.vocab << ", context " << c.context << ", width " << c.width << ", layers "
            << c.layers << ", heads " << c.heads << "\nwrote " << a.output << " ("
            << nn::to_string(layout) << " layout, "
            << (dtype ? std::string(name(*dtype)) : std::string("dtypes kept")) << ")\n";
}

// The llama checkpoint folder `input` names (the folder, or its model.safetensors), or empty.
std::filesystem::path llama_checkpoint(const std::string& input) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = input;
  if (!fs::is_directory(dir, ec)) {
    if (dir.filename() != train::kModelFile) return {};
    dir = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
    if (!fs::exists(dir / train::kStateFile, ec)) return {};
    try {
      if (!nn::is_llama_model(train::read_checkpoint_config(dir).model.name)) return {};
    } catch (const std::exception&) {
      return {};  // not a checkpoint mixp can read: the GPT-2 file path reports the error
    }
  }
  return dir;
}

// --layout hf of a LLaMA-family checkpoint folder: a Hugging Face directory (train/export_hf.h).
void run_llama_export(const ConvertArgs& a, const std::filesystem::path& ck, bool round_given) {
  if (a.layout != "hf") {
    throw UsageError(fmt::format(
        "{} is a checkpoint folder; a LLaMA-family checkpoint exports with --layout hf (a "
        "Hugging Face directory), not --layout {}",
        a.input, a.layout.empty() ? std::string("(none)") : a.layout));
  }
  if (a.block_given || a.saturate || round_given || !a.tile.empty() || a.pow2_scales ||
      !a.scale_mode.empty() || a.heads != 0) {
    throw UsageError(
        "--layout hf of a llama checkpoint writes a Hugging Face directory; --block, --saturate, "
        "--round, --tile, --pow2-scales, --scale-mode and --heads do not apply");
  }
  train::HfExportOptions opt;
  try {
    if (!a.to.empty()) opt.write.dtype = parse_dtype(a.to);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--to: ") + e.what());
  }
  const DType d = opt.write.dtype;
  if (d != DType::fp32 && d != DType::bf16 && d != DType::fp16)
    throw UsageError("with --layout hf, --to is the storage dtype: fp32, bf16 or fp16");
  try {
    if (!a.shard_size.empty()) opt.write.max_shard_bytes = train::parse_byte_size(a.shard_size);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--shard-size: ") + e.what());
  }
  opt.lora_from = a.lora_from;
  const train::HfExportResult r = train::export_checkpoint_hf(ck, a.output, opt);
  const nn::LlamaConfig& c = r.config;
  if (a.json) {
    print_json({{"input", a.input},
                {"output", a.output},
                {"layout", "hf"},
                {"model_type", r.model_type},
                {"dtype", std::string(name(opt.write.dtype))},
                {"parameters", r.parameters},
                {"shards", r.shards},
                {"max_shard_bytes", opt.write.max_shard_bytes},
                {"merged_lora_layers", r.merged_layers},
                {"vocab", c.vocab},
                {"width", c.width},
                {"layers", c.layers},
                {"heads", c.heads},
                {"kv_heads", c.kv()}});
    return;
  }
  std::cout << "read checkpoint " << ck.string() << ": " << r.model_type << ", " << c.layers
            << " layers, width " << c.width << ", heads " << c.heads << " / " << c.kv()
            << ", vocab " << c.vocab << ", " << r.parameters << " parameters";
  if (r.merged_layers > 0)
    std::cout << "; LoRA adapters merged into " << r.merged_layers << " Linear layers";
  std::cout << "\nwrote " << a.output << " (Hugging Face layout, " << name(opt.write.dtype) << ", "
            << (r.shards == 1 ? std::string("model.safetensors")
                              : fmt::format("{} shards + model.safetensors.index.json", r.shards))
            << ")\n";
}

void run(const ConvertArgs& a) {
  // Check every option before touching any file.
  FileConvertOptions opt;
  opt.to = a.to;
  opt.overflow = a.saturate ? Overflow::saturate : Overflow::ieee;
  opt.seed = a.seed;
  opt.pow2_scales = a.pow2_scales;
  opt.scale_mode = a.scale_mode;
  try {
    if (!a.tile.empty()) opt.tile_rows = parse_tile(a.tile, a.to);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (a.block_given) {
    if (a.block <= 0)
      throw UsageError("--block must be a positive number of elements, not " +
                       std::to_string(a.block));
    opt.block_size = a.block;
  }
  try {
    opt.round = parse_round(a.round);
    validate_convert_options(opt);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  // Verified against the manifest of a checkpoint folder that holds it (io/manifest.h).
  const SafeTensorsFile in = parse_safetensors(read_file_verified(a.input), a.input);
  FileConversion conv;
  try {
    conv = convert_safetensors(in, opt);
  } catch (const std::exception& e) {
    // Every error names the file (the library's name the tensor).
    throw std::runtime_error(a.input + ": " + e.what());
  }
  // A format without infinities (E4M3FN: NaN is its only special value) stores an overflow as
  // NaN; a model file with NaN in it is useless, so that needs --saturate (docs/cli.md).
  uint64_t nans = 0;
  const TensorConversion* first = nullptr;
  for (const TensorConversion& t : conv.tensors) {
    nans += t.nan_created;
    if (t.nan_created > 0 && !first) first = &t;
  }
  if (nans > 0) {
    const ConvertTarget target = resolve_convert_target(a.to);
    throw UsageError(fmt::format(
        "{}: {} value(s) (the first in tensor '{}') are out of the range of {}, which has no "
        "infinity: they would be stored as NaN. Add --saturate to store them as +-{:g}, its "
        "largest finite value, or convert to a format with a wider range (bf16, fp8_e5m2)",
        a.input, nans, first->name, target.name, traits(target.dtype).max_finite));
  }
  write_safetensors(a.output, conv.file);

  uint64_t before = 0, after = 0;
  for (const TensorConversion& t : conv.tensors) {
    before += t.bytes_before;
    after += t.bytes_after;
  }
  if (a.json) {
    Json tensors = Json::array();
    for (const TensorConversion& t : conv.tensors) {
      tensors.push_back({{"name", t.name},
                         {"shape", t.shape},
                         {"from", t.from},
                         {"to", t.to},
                         {"converted", t.converted},
                         {"max_abs_error", json_number(t.max_abs_error)},
                         {"nonfinite_created", t.nonfinite_created},
                         {"bytes_before", t.bytes_before},
                         {"bytes_after", t.bytes_after}});
    }
    print_json({{"input", a.input},
                {"output", a.output},
                {"to", resolve_convert_target(a.to).name},
                {"round", to_string(opt.round)},
                {"overflow", to_string(opt.overflow)},
                {"tensors", tensors},
                {"bytes_before", before},
                {"bytes_after", after}});
    return;
  }
  TextTable tt({"tensor", "shape", "from", "to", "max abs error", "bytes before", "bytes after"});
  for (const TensorConversion& t : conv.tensors) {
    std::string err = t.converted ? fmt::format("{:.3g}", t.max_abs_error) : "-";
    if (t.nonfinite_created) err += fmt::format(" ({} overflowed to inf)", t.nonfinite_created);
    tt.add({t.name, shape_text(t.shape), t.from, t.converted ? t.to : "(unchanged)", err,
            std::to_string(t.bytes_before), std::to_string(t.bytes_after)});
  }
  tt.add({"total", "", "", "", "", std::to_string(before), std::to_string(after)});
  tt.print(std::cout);
  std::cout << "\nwrote " << a.output << " (" << conv.tensors.size() << " tensors, "
            << resolve_convert_target(a.to).name << ", rounding " << to_string(opt.round) << ")\n";
}

RegisterCommand reg(20, [](CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* sub =
      app.add_subcommand("convert", "re-encode every floating tensor of a .safetensors file");
  sub->add_option("input", a->input,
                  "the .safetensors file to read, or a llama checkpoint folder (--layout hf)")
      ->required();
  sub->add_option("-o,--output", a->output,
                  "the .safetensors file to write (atomically), or the Hugging Face directory")
      ->required();
  sub->add_option("--to", a->to,
                  "target format: " + convert_target_names() +
                      " (required, except with --layout, where it is the storage dtype)");
  auto* round = sub->add_option("--round", a->round,
                                "nearest-even (default), toward-zero, stochastic, nearest-away");
  sub->add_option("--layout", a->layout,
                  "GPT-2 weights: write this layout (hf, llmc, mixp) from any of them");
  sub->add_option("--heads", a->heads,
                  "--layout: attention heads of a Hugging Face file (default width / 64)");
  sub->add_option("--seed", a->seed, "seed for --round stochastic (default 0)");
  sub->add_flag("--saturate", a->saturate,
                "clamp overflow to the largest finite value instead of inf (needed for a format "
                "without inf, fp8_e4m3, when a value overflows: NaN is never written)");
  auto* block =
      sub->add_option("--block", a->block,
                      "elements per scale for block formats (default: 32 for MX, 64 for int4/nf4)");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);  // --heads, --seed
  int_range(block, 1, 1 << 16);
  sub->add_option("--tile", a->tile,
                  "nvfp4: 16x16 (default, the recipe's weight tiles) or 1x16; fp8-block: "
                  "128x128 (default) or 1x128");
  sub->add_flag("--pow2-scales", a->pow2_scales, "fp8-block: power-of-two block scales");
  sub->add_option("--scale-mode", a->scale_mode,
                  "mxfp4: floor (default, OCP MX: floor(log2 amax) - 2) or ceil (the mxfp4 "
                  "training recipe's: ceil(log2(amax / 6)))");
  sub->add_option("--shard-size", a->shard_size,
                  "--layout hf of a llama checkpoint: largest shard, e.g. 2GB, 500MB, 1GiB "
                  "(default 5GB, save_pretrained's); larger models get model-0000N-of-0000M "
                  "shards and model.safetensors.index.json");
  sub->add_option("--lora-from", a->lora_from,
                  "--layout hf of a llama checkpoint: merge this PEFT adapter folder into the "
                  "base (a --lora run's own adapters are always merged)");
  sub->add_flag("--json", a->json, "print one JSON object on stdout");
  sub->footer(
      "Element formats (fp64 fp32 tf32 bf16 fp16 fp8_e4m3 fp8_e5m2) are written as safetensors "
      "dtypes\n"
      "(tf32 as F32 values on the tf32 grid). Block formats (mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3\n"
      "mxfp6_e3m2 mxfp4 mxint8 int4 nf4 int8 int8_affine int8_channel; fp6_e2m3/fp6_e3m2/fp4_e2m1\n"
      "mean their MX scheme) are written as U8 codes in <name>, scales in <name>.scale (U8 e8m0 "
      "or\n"
      "F32), zero points in <name>.zero_point, and a description in __metadata__[\"mixp.<name>\"]\n"
      "so mixp can decode them. Integer tensors are copied unchanged; an earlier mixp block "
      "tensor\n"
      "is decoded first. The output is written atomically: on error there is no output file.\n\n"
      "The training recipes' formats nvfp4 and fp8-block (docs/fp4.md \"Files and tools\") "
      "quantize\n"
      "2-D tensors only (rows x cols, cols the reduction dimension, as a Linear weight [out, "
      "in]);\n"
      "tensors of other ranks (biases, norms) are kept as they are. <name> holds the codes (U8), "
      "<name>.scale\n"
      "the block scales (U8 E4M3 for nvfp4, F32 for fp8-block), <name>.amax nvfp4's tensor amax "
      "(F32).\n"
      "--to fp32 decodes any of these files exactly as the quantizer's dequantization.\n\n"
      "Examples:\n"
      "  mixp convert model.safetensors -o model-bf16.safetensors --to bf16\n"
      "  mixp convert model.safetensors -o model-e4m3.safetensors --to fp8_e4m3 --saturate\n"
      "  mixp convert model.safetensors -o model-mxfp4.safetensors --to mxfp4 --block 32\n"
      "  mixp convert model.safetensors -o model-nf4.safetensors --to nf4 --json\n"
      "  mixp convert model.safetensors -o model-nvfp4.safetensors --to nvfp4 --tile 1x16\n"
      "  mixp convert model.safetensors -o model-fp8b.safetensors --to fp8-block\n"
      "  mixp convert model-nvfp4.safetensors -o model-back.safetensors --to fp32\n"
      "  mixp convert model.safetensors -o model-sr.safetensors --to bf16 --round stochastic "
      "--seed 1\n\n"
      "GPT-2 weights (--layout; docs/io.md): the input is read in any of the layouts mixp (a\n"
      "gpt2 model's state), hf (Hugging Face GPT-2 safetensors, Conv1D [in, out] weights, "
      "optional\n"
      "`transformer.` prefix) or llmc (llm.c's model .bin, version 3 fp32 / 5 bf16), detected "
      "from\n"
      "the file, and written in the one named; --to fp32|bf16|fp16 picks the storage dtype.\n"
      "  mixp convert gpt2_124M.bin -o gpt2.safetensors --layout hf\n"
      "  mixp convert model.safetensors -o gpt2_124M_bf16.bin --layout llmc --to bf16\n\n"
      "LLaMA-family checkpoints (--layout hf; docs/llama.md \"Export\"): the input is a checkpoint\n"
      "folder of `mixp train --model llama|<preset> --save DIR` (or its model.safetensors), the\n"
      "output a Hugging Face directory: config.json, model.safetensors or shards of at most\n"
      "--shard-size and model.safetensors.index.json; HF's tensor names, --to fp32|bf16|fp16\n"
      "(default bf16). A LoRA run's adapters, or --lora-from's, are merged (W + scaling B A).\n"
      "The directory is written atomically (an existing one is replaced only when all is done).\n"
      "  mixp convert run/ -o smollm-ft --layout hf\n"
      "  mixp convert run/ -o llama-ft --layout hf --to fp16 --shard-size 2GB\n"
      "  mixp convert base-run/ -o merged --layout hf --lora-from adapter/\n");
  sub->callback([a, block, round] {
    a->block_given = block->count() > 0;
    const std::filesystem::path ck = llama_checkpoint(a->input);
    if (!ck.empty()) return run_llama_export(*a, ck, round->count() > 0);
    if (!a->shard_size.empty() || !a->lora_from.empty()) {
      throw UsageError(
          "--shard-size and --lora-from apply to --layout hf of a llama checkpoint folder; " +
          a->input + " is not one");
    }
    if (!a->layout.empty()) return run_layout(*a, round->count() > 0);
    if (a->to.empty()) throw UsageError("--to is required (the target format)");
    run(*a);
  });
});

}  // namespace
}  // namespace mixp::cli
