// `mixp convert`: re-encode every floating tensor of a .safetensors file into one format. The
// work is mixp::convert_safetensors (include/mixp/io/convert_safetensors.h); the file is written
// atomically, so a failure leaves no output file (and an existing one unchanged).
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/manifest.h"
#include "mixp/io/safetensors.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct ConvertArgs {
  std::string input, output, to, round = "nearest-even";
  uint64_t seed = 0;
  bool saturate = false, json = false;
  int block = 0;
  bool block_given = false;  // --block was on the command line
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void run(const ConvertArgs& a) {
  // Check every option before touching any file.
  FileConvertOptions opt;
  opt.to = a.to;
  opt.overflow = a.saturate ? Overflow::saturate : Overflow::ieee;
  opt.seed = a.seed;
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
    if (t.nonfinite_created) err += fmt::format(" ({} overflowed)", t.nonfinite_created);
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
  sub->add_option("input", a->input, "the .safetensors file to read")->required();
  sub->add_option("-o,--output", a->output, "the .safetensors file to write (atomically)")
      ->required();
  sub->add_option("--to", a->to, "target format: " + convert_target_names())->required();
  sub->add_option("--round", a->round,
                  "nearest-even (default), toward-zero, stochastic, nearest-away");
  sub->add_option("--seed", a->seed, "seed for --round stochastic (default 0)");
  sub->add_flag("--saturate", a->saturate,
                "clamp overflow to the largest finite value instead of inf/NaN");
  auto* block =
      sub->add_option("--block", a->block,
                      "elements per scale for block formats (default: 32 for MX, 64 for int4/nf4)");
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
      "Examples:\n"
      "  mixp convert model.safetensors -o model-bf16.safetensors --to bf16\n"
      "  mixp convert model.safetensors -o model-e4m3.safetensors --to fp8_e4m3 --saturate\n"
      "  mixp convert model.safetensors -o model-mxfp4.safetensors --to mxfp4 --block 32\n"
      "  mixp convert model.safetensors -o model-nf4.safetensors --to nf4 --json\n"
      "  mixp convert model.safetensors -o model-sr.safetensors --to bf16 --round stochastic "
      "--seed 1\n");
  sub->callback([a, block] {
    a->block_given = block->count() > 0;
    run(*a);
  });
});

}  // namespace
}  // namespace mixp::cli
