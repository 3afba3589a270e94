// GPT-2 weights: the mixp and Hugging Face layouts, and moving weights in and out of a model
// (nn/gpt2_weights.h). llm.c's layout is gpt2_llmc.cpp.
#include "mixp/nn/gpt2_weights.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "gpt2_weights_detail.h"
#include "mixp/nn/lora_io.h"
#include "mixp/nn/models.h"
#include "mixp/nn/serialize.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {
namespace fs = std::filesystem;

namespace {
constexpr const char* kVocabKey = "mixp.gpt2.vocab";
constexpr const char* kHeadsKey = "mixp.gpt2.heads";

std::string shape_str(const std::vector<int64_t>& s) {
  return Shape(s.begin(), s.end()).str();
}

int64_t heads_for(int64_t width, int64_t heads) {
  return heads > 0 ? heads : std::max<int64_t>(1, width / 64);
}

// The Hugging Face name of a mixp name, and whether its data is stored transposed (Conv1D).
std::pair<std::string, bool> hf_name_of(const std::string& n) {
  if (n == "tok_emb.weight") return {"wte.weight", false};
  if (n == "pos_emb.weight") return {"wpe.weight", false};
  if (n.starts_with("ln_f.")) return {n, false};
  // blocks.N.<part>.<weight|bias>
  const size_t a = n.find('.', 7);
  const std::string layer = n.substr(7, a - 7);
  std::string rest = n.substr(a + 1);
  static const std::pair<const char*, const char*> kParts[] = {{"ln1.", "ln_1."},
                                                               {"ln2.", "ln_2."},
                                                               {"attn.qkv.", "attn.c_attn."},
                                                               {"attn.proj.", "attn.c_proj."},
                                                               {"mlp.fc.", "mlp.c_fc."},
                                                               {"mlp.proj.", "mlp.c_proj."}};
  for (const auto& [from, to] : kParts) {
    if (rest.starts_with(from)) {
      const std::string leaf = rest.substr(std::strlen(from));
      const bool linear = rest.starts_with("attn.") || rest.starts_with("mlp.");
      return {"h." + layer + "." + to + leaf, linear && leaf == "weight"};
    }
  }
  throw std::logic_error("gpt2_weights: no Hugging Face name for " + n);
}

void check_shape(const SafeTensor& s, const std::vector<int64_t>& want, const std::string& source,
                 const std::string& shown_name) {
  if (s.shape != want) {
    throw std::invalid_argument(
        fmt::format("{}: tensor '{}' has shape {} but a GPT-2 of this configuration needs {}; the "
                    "file is not a GPT-2 checkpoint of this shape",
                    source, shown_name, shape_str(s.shape), shape_str(want)));
  }
}

const SafeTensor& require_tensor(const SafeTensorsFile& f, const std::string& name,
                                 const std::string& source, const std::string& what) {
  const SafeTensor* s = f.find(name);
  if (!s) {
    throw std::invalid_argument(
        fmt::format("{}: has no tensor '{}'{}; it is not a GPT-2 checkpoint of this shape", source,
                    name, what.empty() ? "" : " (" + what + ")"));
  }
  return *s;
}

}  // namespace

namespace detail {

std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_expected_shapes(const GptConfig& c) {
  const int64_t C = c.width, M = c.mlp_width;
  std::vector<std::pair<std::string, std::vector<int64_t>>> v;
  v.push_back({"tok_emb.weight", {c.vocab, C}});
  v.push_back({"pos_emb.weight", {c.context, C}});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    v.push_back({b + "ln1.weight", {C}});
    v.push_back({b + "ln1.bias", {C}});
    v.push_back({b + "attn.qkv.weight", {3 * C, C}});
    v.push_back({b + "attn.qkv.bias", {3 * C}});
    v.push_back({b + "attn.proj.weight", {C, C}});
    v.push_back({b + "attn.proj.bias", {C}});
    v.push_back({b + "ln2.weight", {C}});
    v.push_back({b + "ln2.bias", {C}});
    v.push_back({b + "mlp.fc.weight", {M, C}});
    v.push_back({b + "mlp.fc.bias", {M}});
    v.push_back({b + "mlp.proj.weight", {C, M}});
    v.push_back({b + "mlp.proj.bias", {C}});
  }
  v.push_back({"ln_f.weight", {C}});
  v.push_back({"ln_f.bias", {C}});
  return v;
}

SafeTensor transposed(const SafeTensor& s, std::string name) {
  const int64_t rows = s.shape.at(0), cols = s.shape.at(1);
  const size_t e = size_t(traits(s.dtype).storage_bytes);
  SafeTensor t{std::move(name), s.dtype, {cols, rows}, std::vector<std::byte>(s.data.size())};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&t.data[size_t(c * rows + r) * e], &s.data[size_t(r * cols + c) * e], e);
  return t;
}

SafeTensor with_rows(const SafeTensor& s, int64_t rows) {
  SafeTensor t = s;
  const int64_t cols = s.shape.at(1);
  const size_t row_bytes = size_t(cols) * size_t(traits(s.dtype).storage_bytes);
  t.shape[0] = rows;
  t.data.resize(size_t(rows) * row_bytes, std::byte{0});  // new rows are zeros
  return t;
}

SafeTensor as_dtype(const SafeTensor& s, DType dtype) {
  if (s.dtype == dtype) return s;
  Tensor t = empty(Shape(s.shape.begin(), s.shape.end()), {.dtype = dtype});
  copy_from_safetensor(t, s);
  return to_safetensor(s.name, t);
}

void check_gpt2_weights(const Gpt2Weights& w, const std::string& source) {
  for (const auto& [name, shape] : gpt2_expected_shapes(w.config)) {
    check_shape(require_tensor(w.tensors, name, source, ""), shape, source, name);
  }
}

}  // namespace detail

std::string_view to_string(Gpt2Layout layout) {
  switch (layout) {
    case Gpt2Layout::mixp:
      return "mixp";
    case Gpt2Layout::hf:
      return "hf";
    case Gpt2Layout::llmc:
      return "llmc";
  }
  return "?";
}

Gpt2Layout parse_gpt2_layout(std::string_view name) {
  for (Gpt2Layout l : {Gpt2Layout::mixp, Gpt2Layout::hf, Gpt2Layout::llmc}) {
    if (name == to_string(l)) return l;
  }
  throw std::invalid_argument(
      fmt::format("unknown GPT-2 weights layout '{}'; known layouts: mixp, hf, llmc", name));
}

namespace {

// Name-only look at a safetensors header.
Gpt2Layout layout_of_names(const SafeTensorsHeader& h, const std::string& source) {
  bool hf = false, mixp = false;
  for (const auto& t : h.tensors) {
    hf |= t.name == "wte.weight" || t.name == "transformer.wte.weight";
    mixp |= t.name == "tok_emb.weight";
  }
  if (mixp) return Gpt2Layout::mixp;
  if (hf) return Gpt2Layout::hf;
  throw std::invalid_argument(fmt::format(
      "{}: a safetensors file with neither 'wte.weight' (Hugging Face GPT-2) nor "
      "'tok_emb.weight' (mixp gpt2); it is not a GPT-2 checkpoint{}",
      source, h.tensors.empty() ? "" : " (its first tensor is '" + h.tensors[0].name + "')"));
}

const SafeTensorInfo* info(const SafeTensorsHeader& h, const std::string& name) {
  for (const auto& t : h.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// Configuration from tensor shapes (names in `layout`); shape of a missing tensor -> error.
GptConfig config_of_header(const SafeTensorsHeader& h, Gpt2Layout layout, int64_t heads,
                           const std::string& source) {
  auto need = [&](const std::string& name) -> const SafeTensorInfo& {
    const SafeTensorInfo* t = info(h, name);
    if (!t || t->shape.size() != 2) {
      throw std::invalid_argument(
          fmt::format("{}: {} tensor '{}'; it is not a GPT-2 checkpoint in the {} layout", source,
                      t ? "a non-2-D" : "has no", name, to_string(layout)));
    }
    return *t;
  };
  GptConfig c;
  c.tied_head = true;
  c.layers = 0;  // counted below
  if (layout == Gpt2Layout::hf) {
    const std::string p = info(h, "transformer.wte.weight") ? "transformer." : "";
    const auto& wte = need(p + "wte.weight");
    c.vocab = wte.shape[0];
    c.width = wte.shape[1];
    c.context = need(p + "wpe.weight").shape[0];
    while (info(h, fmt::format("{}h.{}.ln_1.weight", p, c.layers))) ++c.layers;
    c.mlp_width = c.layers > 0 ? need(p + "h.0.mlp.c_fc.weight").shape[1] : 4 * c.width;
  } else {
    const auto& wte = need("tok_emb.weight");
    c.vocab = wte.shape[0];
    c.width = wte.shape[1];
    c.context = need("pos_emb.weight").shape[0];
    while (info(h, fmt::format("blocks.{}.ln1.weight", c.layers))) ++c.layers;
    c.mlp_width = c.layers > 0 ? need("blocks.0.mlp.fc.weight").shape[0] : 4 * c.width;
    if (auto it = h.metadata.find(kVocabKey); it != h.metadata.end()) {
      c.padded_vocab = c.vocab;
      c.vocab = std::stoll(it->second);
    }
    if (heads == 0) {
      if (auto it = h.metadata.find(kHeadsKey); it != h.metadata.end())
        heads = std::stoll(it->second);
    }
  }
  if (c.layers == 0) {
    throw std::invalid_argument(
        fmt::format("{}: no transformer blocks found (no '{}'); it is not a GPT-2 checkpoint",
                    source, layout == Gpt2Layout::hf ? "h.0.ln_1.weight" : "blocks.0.ln1.weight"));
  }
  c.heads = heads_for(c.width, heads);
  return c;
}

}  // namespace

Gpt2Layout detect_gpt2_layout(const fs::path& path) {
  if (detail::is_llmc_model_file(path)) return Gpt2Layout::llmc;
  return layout_of_names(read_safetensors_header(path), path.string());
}

GptConfig read_gpt2_config(const fs::path& path, int64_t heads) {
  if (detail::is_llmc_model_file(path)) return detail::read_llmc_config(path);
  const SafeTensorsHeader h = read_safetensors_header(path);
  return config_of_header(h, layout_of_names(h, path.string()), heads, path.string());
}

Gpt2Weights read_gpt2_weights(const fs::path& path, int64_t heads) {
  const std::string source = path.string();
  if (detail::is_llmc_model_file(path)) return detail::read_llmc_weights(path);
  const SafeTensorsHeader h = read_safetensors_header(path);
  const Gpt2Layout layout = layout_of_names(h, source);
  Gpt2Weights w;
  w.config = config_of_header(h, layout, heads, source);
  SafeTensorsFile f = read_safetensors(path);
  if (layout == Gpt2Layout::mixp) {
    // A LoRA run's model file: its adapters are merged into the base (W + scaling B A), which is
    // what the other layouts, having no place for adapters, can hold (nn/lora_io.h).
    merge_lora_tensors(f, source);
    for (const auto& [name, shape] : detail::gpt2_expected_shapes(w.config)) {
      const SafeTensor& s = require_tensor(f, name, source, "");
      if (name == "tok_emb.weight") {
        const int64_t rows = w.config.padded_vocab > 0 ? w.config.padded_vocab : w.config.vocab;
        check_shape(s, {rows, w.config.width}, source, name);
        w.tensors.tensors.push_back(detail::with_rows(s, w.config.vocab));
      } else {
        check_shape(s, shape, source, name);
        w.tensors.tensors.push_back(s);
      }
    }
    return w;
  }
  const std::string p = f.find("transformer.wte.weight") ? "transformer." : "";
  for (const auto& [name, shape] : detail::gpt2_expected_shapes(w.config)) {
    const auto [hf, transpose] = hf_name_of(name);
    const SafeTensor& s = require_tensor(f, p + hf, source, "");
    const std::vector<int64_t> stored =
        transpose ? std::vector<int64_t>{shape[1], shape[0]} : shape;
    check_shape(s, stored, source, p + hf);
    w.tensors.tensors.push_back(transpose ? detail::transposed(s, name) : [&] {
      SafeTensor t = s;
      t.name = name;
      return t;
    }());
  }
  return w;
}

void write_gpt2_weights(const Gpt2Weights& w, const fs::path& path, Gpt2Layout layout,
                        std::optional<DType> dtype) {
  const std::string target = path.string();
  detail::check_gpt2_weights(w, "the weights to write to " + target);
  if (dtype && *dtype != DType::fp32 && *dtype != DType::bf16 && *dtype != DType::fp16) {
    throw std::invalid_argument(
        fmt::format("GPT-2 weights are stored as fp32, bf16 or fp16, not {}", name(*dtype)));
  }
  if (layout == Gpt2Layout::llmc) {
    detail::write_llmc_weights(w, path, dtype);
    return;
  }
  SafeTensorsFile out;
  // The mixp layout is the model's own state: the embedding has the model's padded rows.
  const int64_t rows = w.config.padded_vocab > w.config.vocab ? w.config.padded_vocab
                                                              : padded_vocab_size(w.config.vocab);
  for (const SafeTensor& s0 : w.tensors.tensors) {
    const SafeTensor s = dtype ? detail::as_dtype(s0, *dtype) : s0;
    if (layout == Gpt2Layout::mixp) {
      out.tensors.push_back(s.name == "tok_emb.weight" ? detail::with_rows(s, rows) : s);
      continue;
    }
    const auto [hf, transpose] = hf_name_of(s.name);
    if (transpose) {
      out.tensors.push_back(detail::transposed(s, hf));
    } else {
      SafeTensor t = s;
      t.name = hf;
      out.tensors.push_back(std::move(t));
    }
  }
  if (layout == Gpt2Layout::mixp) {
    out.metadata[kVocabKey] = std::to_string(w.config.vocab);
    out.metadata[kHeadsKey] = std::to_string(w.config.heads);
  } else {
    out.metadata["format"] = "pt";  // what transformers' save_pretrained writes
  }
  write_safetensors(path, out);
}

Gpt2Weights gpt2_weights_of(const Gpt& model) {
  Gpt2Weights w;
  w.config = model.config();
  w.config.checkpointing = false;
  for (const auto& [name, t] : model.state_dict()) {
    SafeTensor s = to_safetensor(name, t);
    if (name == "tok_emb.weight") s = detail::with_rows(s, w.config.vocab);
    w.tensors.tensors.push_back(std::move(s));
  }
  detail::check_gpt2_weights(w, "the model");
  return w;
}

void add_gpt2_metadata(const Module& model, SafeTensorsFile& file) {
  const auto* g = dynamic_cast<const Gpt*>(&model);
  if (!g || !g->config().tied_head) return;
  file.metadata[kVocabKey] = std::to_string(g->config().vocab);
  file.metadata[kHeadsKey] = std::to_string(g->config().heads);
}

void load_gpt2_weights(Gpt& model, const Gpt2Weights& w, const std::string& source) {
  const GptConfig& m = model.config();
  const GptConfig& f = w.config;
  if (!m.tied_head) {
    throw std::invalid_argument(fmt::format(
        "{}: GPT-2 weights load into a model with a tied head (gpt2, gpt2-medium), not 'gpt'",
        source));
  }
  // A file whose vocabulary is exactly the model's padded rows (a mixp file without metadata, or
  // converted from one) loads: the rows past the model's vocab are then padding.
  const bool padded_rows = f.vocab > m.vocab && f.vocab == model.embedding_rows();
  auto field = [&](const char* what, const char* flag, int64_t file, int64_t mine) {
    if (file != mine) {
      throw std::invalid_argument(fmt::format(
          "{}: the file's GPT-2 has {} {} but the model has {}; {}", source, what, file, mine,
          flag[0] ? fmt::format("pass {} {}", flag, file)
                  : std::string("the data decides the model's vocabulary (GPT-2 "
                                "token files: 50257)")));
    }
  };
  if (!padded_rows) field("vocab", "", f.vocab, m.vocab);
  field("width", "--width", f.width, m.width);
  field("layers", "--layers", f.layers, m.layers);
  field("heads", "--heads", f.heads, m.heads);
  field("mlp_width", "--mlp-width", f.mlp_width, m.mlp_width);
  if (f.context < m.context) {
    throw std::invalid_argument(
        fmt::format("{}: the file's GPT-2 learned {} positions but the model's context is {}; "
                    "pass --context {} or less",
                    source, f.context, m.context, f.context));
  }
  detail::check_gpt2_weights(w, source);
  SafeTensorsFile file;
  for (const SafeTensor& s : w.tensors.tensors) {
    if (s.name == "tok_emb.weight") {
      file.tensors.push_back(detail::with_rows(s, model.embedding_rows()));
    } else if (s.name == "pos_emb.weight") {
      file.tensors.push_back(detail::with_rows(s, m.context));  // the first positions
    } else {
      file.tensors.push_back(s);
    }
  }
  load_safetensors(model, file, source);
}

}  // namespace mixp::nn
