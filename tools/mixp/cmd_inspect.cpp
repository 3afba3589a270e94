// `mixp inspect report RUN.jsonl -o inspect.html`: renders the statistics `mixp train --inspect`
// wrote (docs/inspect.md, "The report"). Printing only; the page is inspect::write_inspect_report.
// `mixp inspect blocks FILE --format F`: the block-scaled quantizers' per-block statistics of a
// model file (inspect/block_stats.h; docs/inspect.md "Block-scaled formats").
#include <iostream>
#include <memory>
#include <string>

#include "block_tile_flag.h"
#include "command.h"
#include "mixp/inspect/block_stats.h"
#include "mixp/inspect/inspect_report.h"
#include "mixp/io/block_scaled_safetensors.h"
#include "mixp/io/manifest.h"
#include "mixp/io/quantized_safetensors.h"
#include "mixp/io/safetensors.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct ReportOptions {
  std::string input;
  std::string output = "inspect.html";
};

void run_report(const ReportOptions& o) {
  try {
    inspect::write_inspect_report(o.input, o.output);
  } catch (const inspect::InspectError& e) {
    throw UsageError(e.what());
  }
  std::cout << "wrote " << o.output << "\n";
}

// `mixp inspect blocks FILE --format nvfp4|mxfp4|fp8-block`: what the recipe's quantizer does to
// each 2-D tensor of a .safetensors file, block by block (inspect/block_stats.h).
struct BlocksOptions {
  std::string input, format, tile;
  bool per_block = false, json = false;
};

void run_blocks(const BlocksOptions& o) {
  BlockScaledOptions opt;
  const bool stored_only = o.format.empty();  // tensors already in an nvfp4/fp8-block layout
  if (stored_only) {
    if (!o.tile.empty()) throw UsageError("--tile goes with --format");
  } else if (o.format == "nvfp4") {
    opt.scheme = BlockScheme::nvfp4;
  } else if (o.format == "mxfp4") {
    opt.scheme = BlockScheme::mxfp4;
  } else if (o.format == "fp8-block" || o.format == "fp8_block") {
    opt.scheme = BlockScheme::fp8_block;
  } else {
    throw UsageError("--format '" + o.format + "': use nvfp4, mxfp4 or fp8-block");
  }
  // The recipes' weight tiles by default (16x16, 1x32, 128x128), as mixp convert.
  const int tc = block_scaled_tile_cols(opt.scheme);
  if (!stored_only) {
    opt.tile_rows = o.tile.empty() ? (opt.scheme == BlockScheme::mxfp4 ? 1 : tc)
                                   : parse_block_tile(o.tile, opt.scheme);
  }
  const SafeTensorsFile f = parse_safetensors(read_file_verified(o.input), o.input);
  Json records = Json::array(), skipped = Json::array();
  TextTable tt({"tensor", "shape", "blocks", "underflow", "saturated", "blocks w/ underflow",
                "blocks w/ saturation", "scale saturated"});
  for (const std::string& name : logical_tensor_names(f)) {
    std::vector<int64_t> shape;
    std::vector<float> x;
    const SafeTensor* t = f.find(name);
    inspect::BlockScaledStats s;
    if (stored_only) {
      if (!is_block_scaled_tensor(f, name)) {
        skipped.push_back(name);
        continue;
      }
      const BlockScaledTensor q = get_block_scaled_tensor(f, name);
      shape = {q.rows, q.cols};
      s = inspect::stored_block_stats(q);
    } else {
      const bool floating = is_block_tensor(f, name) || traits(t->dtype).kind == DKind::floating;
      if (floating) x = read_tensor_f32(f, name, &shape);
      if (!floating || shape.size() != 2) {
        skipped.push_back(name);
        continue;
      }
      try {
        s = inspect::block_scaled_stats(x, shape[0], shape[1], opt);
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(o.input + ": tensor '" + name + "': " + e.what());
      }
    }
    const auto known = [](int64_t n) { return n < 0 ? Json(nullptr) : Json(n); };
    Json r = {{"tensor", name},
              {"format", std::string(to_string(s.options.scheme))},
              {"tile", fmt::format("{}x{}", s.options.tile_rows, s.tile_cols)},
              {"source", s.from_codes ? "codes" : "values"},
              {"shape", shape},
              {"numel", s.numel},
              {"zeros", s.zeros},
              {"blocks", s.blocks},
              {"underflow", known(s.underflow)},
              {"saturated", known(s.saturated)},
              {"blocks_with_underflow", known(s.blocks_with_underflow)},
              {"blocks_with_saturation", known(s.blocks_with_saturation)},
              {"scale_saturated", s.scale_saturated},
              {"share_scale_saturated", s.share_scale_saturated()},
              {"mse", s.mse}};
    if (o.per_block) {
      r["per_block"] = {{"underflow", s.block_underflow},
                        {"saturated", s.block_saturated},
                        {"scale_saturated", s.block_scale_saturated}};
    }
    if (s.from_codes) r["at_max"] = s.at_max;
    records.push_back(r);
    const auto pct = [&](int64_t n, int64_t of) {
      if (n < 0) return std::string("-");
      return fmt::format("{} ({:.3g}%)", n, of > 0 ? 100.0 * double(n) / double(of) : 0.0);
    };
    tt.add({name, fmt::format("[{}, {}]", shape[0], shape[1]), std::to_string(s.blocks),
            pct(s.underflow, s.numel - s.zeros), pct(s.saturated, s.numel - s.zeros),
            pct(s.blocks_with_underflow, s.blocks), pct(s.blocks_with_saturation, s.blocks),
            pct(s.scale_saturated, s.blocks)});
  }
  const std::string tile = fmt::format("{}x{}", opt.tile_rows, tc);
  if (o.json) {
    print_json({{"input", o.input},
                {"format", stored_only ? Json(nullptr) : Json(std::string(to_string(opt.scheme)))},
                {"tile", stored_only ? Json(nullptr) : Json(tile)},
                {"tensors", records},
                {"skipped", skipped}});
    return;
  }
  if (stored_only) {
    std::cout << o.input << ": the tensors stored in nvfp4/fp8-block layouts, from their codes "
              << "(underflow and saturation need the original values: give --format):\n";
  } else {
    std::cout << o.input << " under " << to_string(opt.scheme) << " (" << tile << " tiles):\n";
  }
  tt.print(std::cout);
  std::cout << "\nunderflow and saturated: % of the nonzero values; blocks: % of the tiles. "
            << skipped.size() << " tensor(s) not 2-D floating skipped.\n";
}

RegisterCommand reg(35, [](CLI::App& app) {
  CLI::App* ins = app.add_subcommand(
      "inspect", "work with the tensor statistics of `mixp train --inspect` (docs/inspect.md)");
  ins->require_subcommand(1);
  auto o = std::make_shared<ReportOptions>();
  CLI::App* rep = ins->add_subcommand(
      "report",
      "render a run's statistics as one HTML page: the ranges of every module and role, and per "
      "format a heatmap (module x step) of the overflow and underflow fractions");
  rep->add_option("RUN.jsonl", o->input, "the JSON Lines file of --inspect (its out=)")
      ->required();
  rep->add_option("-o,--out", o->output, "the HTML file to write (atomically)")
      ->capture_default_str();
  rep->footer(
      "Example:\n"
      "  mixp train --model gpt --steps 300 --inspect every=50,out=run.jsonl\n"
      "  mixp inspect report run.jsonl -o inspect.html\n");
  rep->callback([o] { run_report(*o); });

  auto b = std::make_shared<BlocksOptions>();
  CLI::App* blk = ins->add_subcommand(
      "blocks",
      "per-block underflow and saturation of a block-scaled recipe's quantizer (nvfp4, mxfp4, "
      "fp8-block) on each 2-D tensor of a .safetensors file, and the share of blocks whose scale "
      "saturated");
  blk->add_option("FILE.safetensors", b->input,
                  "the model file (any layout mixp reads; block tensors are decoded first)")
      ->required();
  blk->add_option("--format", b->format,
                  "nvfp4, mxfp4 or fp8-block: quantize every 2-D tensor with it; without it, "
                  "report the tensors already stored in an nvfp4/fp8-block layout from their "
                  "codes");
  blk->add_option("--tile", b->tile,
                  "nvfp4 16x16 (default) or 1x16; fp8-block 128x128 (default) or 1x128; mxfp4 "
                  "1x32");
  blk->add_flag("--per-block", b->per_block, "--json: also each block's counts");
  blk->add_flag("--json", b->json, "print one JSON object on stdout");
  blk->footer(
      "Examples:\n"
      "  mixp inspect blocks run/model.safetensors --format nvfp4\n"
      "  mixp inspect blocks run/model.safetensors --format fp8-block --tile 1x128 --json\n");
  blk->callback([b] { run_blocks(*b); });
});

}  // namespace
}  // namespace mixp::cli
