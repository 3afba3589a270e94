#include "mixp/nn/lora_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/llama.h"
#include "mixp/nn/serialize.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

namespace {

constexpr const char* kPrefix = "base_model.model.";
constexpr const char* kWeights = "adapter_model.safetensors";
constexpr const char* kConfig = "adapter_config.json";

bool is_gpt2(Module& model) {
  const auto* g = dynamic_cast<const Gpt*>(&model);
  return g && g->config().tied_head;
}

// blocks.N.<part> -> transformer.h.N.<hf part> (nn/gpt2_weights.cpp's hf_name_of, for modules).
std::string gpt2_path(const std::string& n) {
  if (n == "head") return "lm_head";
  if (!n.starts_with("blocks.")) return "transformer." + n;
  const size_t a = n.find('.', 7);
  if (a == std::string::npos) return "transformer.h." + n.substr(7);
  const std::string layer = n.substr(7, a - 7), rest = n.substr(a + 1);
  static const std::map<std::string, std::string> kParts = {{"attn.qkv", "attn.c_attn"},
                                                            {"attn.proj", "attn.c_proj"},
                                                            {"mlp.fc", "mlp.c_fc"},
                                                            {"mlp.proj", "mlp.c_proj"}};
  const auto it = kParts.find(rest);
  return "transformer.h." + layer + "." + (it == kParts.end() ? rest : it->second);
}

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}", file.string(), what));
}

// PEFT module path (as stored, prefix removed; "transformer." optional for GPT-2) -> mixp name.
std::map<std::string, std::string> path_index(Module& model) {
  std::map<std::string, std::string> out;
  const bool gpt2 = is_gpt2(model);
  for (auto& [name, m] : model.named_modules()) {
    if (!dynamic_cast<Linear*>(m) || name.empty()) continue;
    const std::string p = peft_module_path(model, name);
    out[p] = name;
    if (gpt2 && p.starts_with("transformer.")) out[p.substr(12)] = name;
  }
  return out;
}

// A small text file (adapter_config.json); 1 MiB at most (an adapter directory is untrusted).
std::string read_small_text(const std::filesystem::path& file) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) bad(file, "cannot be read (" + ec.message() + ")");
  if (size > (1u << 20))
    bad(file, fmt::format("is {} bytes; an adapter config is a few hundred", size));
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) bad(file, "cannot be read");
  return ss.str();
}

}  // namespace

std::string peft_module_path(Module& model, const std::string& mixp_name) {
  if (is_gpt2(model)) return gpt2_path(mixp_name);
  // The LLaMA family's modules carry Hugging Face's names without LlamaForCausalLM's "model."
  // (nn/llama.h); PEFT's paths have it: base_model.model.model.layers.0.self_attn.q_proj.
  if (dynamic_cast<const Llama*>(&model) && mixp_name != "lm_head") return "model." + mixp_name;
  return mixp_name;
}

void save_lora_adapter(Module& model, const LoraOptions& opt, const std::filesystem::path& dir,
                       const std::string& base_model) {
  const auto layers = lora_layers(model);
  if (layers.empty())
    throw std::invalid_argument("mixp::nn::save_lora_adapter: the model has no LoRA adapters");
  SafeTensorsFile file;
  file.metadata["format"] = "pt";  // what PEFT's safetensors save writes
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  for (const auto& [name, lin] : layers) {
    const LoraAdapter ad = lora_adapter_of(*lin);
    const std::string path = peft_module_path(model, name);
    file.tensors.push_back(to_safetensor(kPrefix + path + ".lora_A.weight", ad.a->weight()));
    file.tensors.push_back(to_safetensor(kPrefix + path + ".lora_B.weight", ad.b->weight()));
    targets.push_back(path);
  }
  const bool gpt2 = is_gpt2(model);
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::ordered_json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model.empty() ? nlohmann::ordered_json(nullptr)
                                                    : nlohmann::ordered_json(base_model);
  j["bias"] = "none";
  j["fan_in_fan_out"] = gpt2;  // GPT-2's Conv1D stores [in, out] (PEFT warns and sets it)
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["lora_alpha"] = opt.alpha;
  j["lora_dropout"] = opt.dropout;
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = opt.r;
  j["rank_pattern"] = nlohmann::ordered_json::object();
  j["revision"] = nullptr;
  j["target_modules"] = targets;  // full paths: PEFT matches a module whose name ends with one
  j["task_type"] = dynamic_cast<const Gpt*>(&model) ? nlohmann::ordered_json("CAUSAL_LM")
                                                   : nlohmann::ordered_json(nullptr);
  j["use_dora"] = false;
  j["use_rslora"] = opt.use_rslora;
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / kWeights, serialize_safetensors(file));
  write_text_atomic(dir / kConfig, j.dump(2) + "\n");
}

LoraOptions read_lora_config(Module& model, const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kConfig;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_text(file));
  } catch (const nlohmann::json::exception& e) {
    bad(file, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(file, "not a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) bad(file, fmt::format("has no '{}'", key));
    return j[key];
  };
  if (field("peft_type") != "LORA")
    bad(file, fmt::format("peft_type is {}, not \"LORA\"", field("peft_type").dump()));
  if (j.contains("bias") && j["bias"] != "none")
    bad(file, fmt::format("bias {} is not supported (only \"none\": biases stay frozen)",
                          j["bias"].dump()));
  auto flag = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) bad(file, fmt::format("{} must be true or false", key));
    return j[key].get<bool>();
  };
  if (flag("use_dora")) bad(file, "use_dora (DoRA) is not supported");
  for (const char* k : {"rank_pattern", "alpha_pattern"}) {
    if (j.contains(k) && !j[k].is_null() && !j[k].empty())
      bad(file, fmt::format("{} (per-layer ranks or alphas) is not supported", k));
  }
  LoraOptions o;
  const auto& r = field("r");
  if (!r.is_number_integer() || r.get<int64_t>() < 1) bad(file, "r must be an integer >= 1");
  o.r = r.get<int64_t>();
  const auto& alpha = field("lora_alpha");
  if (!alpha.is_number() || !(alpha.get<double>() > 0))
    bad(file, "lora_alpha must be a number > 0");
  o.alpha = alpha.get<double>();
  if (j.contains("lora_dropout")) {
    if (!j["lora_dropout"].is_number()) bad(file, "lora_dropout must be a number");
    o.dropout = j["lora_dropout"].get<double>();
    if (!(o.dropout >= 0 && o.dropout < 1)) bad(file, "lora_dropout must be in [0, 1)");
  }
  o.use_rslora = flag("use_rslora");
  // The adapted layers: those the weights file has matrices for (target_modules may be a regex
  // or a list of suffixes; the keys say exactly which modules were adapted).
  const std::filesystem::path wfile = dir / kWeights;
  const SafeTensorsHeader h = read_safetensors_header(wfile);
  const auto index = path_index(model);
  for (const auto& t : h.tensors) {
    std::string n = t.name;
    if (!n.starts_with(kPrefix))
      bad(wfile, fmt::format("tensor '{}' does not start with '{}'", n, kPrefix));
    n = n.substr(std::string(kPrefix).size());
    const char* suffix = n.ends_with(".lora_A.weight") ? ".lora_A.weight"
                         : n.ends_with(".lora_B.weight") ? ".lora_B.weight" : nullptr;
    if (!suffix) bad(wfile, fmt::format("tensor '{}' is not a lora_A or lora_B weight", t.name));
    const std::string path = n.substr(0, n.size() - std::string(suffix).size());
    const auto it = index.find(path);
    if (it == index.end())
      bad(wfile, fmt::format("tensor '{}': this model has no Linear layer '{}'", t.name, path));
    if (std::find(o.targets.begin(), o.targets.end(), it->second) == o.targets.end())
      o.targets.push_back(it->second);
  }
  if (o.targets.empty()) bad(wfile, "holds no adapter weights");
  return o;
}

void load_lora_adapter(Module& model, const std::filesystem::path& dir, uint64_t seed) {
  LoraOptions o = read_lora_config(model, dir);
  // Targets as exact names: a mixp name is a pattern that matches itself (and its suffixes, which
  // name no other Linear: they all begin with the full path).
  apply_lora(model, o, seed);
  const std::filesystem::path wfile = dir / kWeights;
  const SafeTensorsFile f = read_safetensors(wfile);
  const auto layers = lora_layers(model);
  size_t used = 0;
  for (const auto& [name, lin] : layers) {
    const LoraAdapter ad = lora_adapter_of(*lin);
    for (const auto& [part, mod] : {std::pair{"lora_A", ad.a}, std::pair{"lora_B", ad.b}}) {
      std::string path = peft_module_path(model, name);
      const SafeTensor* s = f.find(kPrefix + path + "." + part + ".weight");
      if (!s && path.starts_with("transformer."))
        s = f.find(kPrefix + path.substr(12) + "." + part + ".weight");
      if (!s) bad(wfile, fmt::format("has no {} for '{}' ({})", part, path, name));
      Tensor w = mod->weight();
      const std::vector<int64_t> want(w.shape().begin(), w.shape().end());
      if (s->shape != want) {
        bad(wfile,
            fmt::format("tensor '{}' has shape {} but r={} on '{}' needs {}", s->name,
                        Shape(s->shape.begin(), s->shape.end()).str(), o.r, path, w.shape().str()));
      }
      copy_from_safetensor(w, *s);
      ++used;
    }
  }
  if (used != f.tensors.size())
    bad(wfile, fmt::format("holds {} tensors but the adapters use {}", f.tensors.size(), used));
}

void merge_lora_tensors(SafeTensorsFile& file, const std::string& source) {
  std::vector<std::string> modules;
  for (const auto& t : file.tensors) {
    if (t.name.ends_with(".lora_A.weight")) modules.push_back(t.name.substr(0, t.name.size() - 14));
  }
  bool has_b = false;
  for (const auto& t : file.tensors) has_b = has_b || t.name.ends_with(".lora_B.weight");
  if (modules.empty() && !has_b) return;
  const auto it = file.metadata.find(kLoraMetadataKey);
  if (it == file.metadata.end()) {
    throw std::invalid_argument(fmt::format(
        "{}: holds LoRA adapters but no '{}' metadata (their rank and alpha); it was not written "
        "by a mixp LoRA run",
        source, kLoraMetadataKey));
  }
  LoraOptions o;
  try {
    o = LoraOptions::parse(it->second);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(
        fmt::format("{}: metadata '{}': {}", source, kLoraMetadataKey, e.what()));
  }
  auto tensor = [&](const std::string& name) {
    const SafeTensor* s = file.find(name);
    if (!s)
      throw std::invalid_argument(fmt::format("{}: has no '{}' for its adapter", source, name));
    Tensor t = empty(Shape(std::span<const int64_t>(s->shape)), {.dtype = s->dtype});
    copy_from_safetensor(t, *s);
    return t;
  };
  NoGradGuard ng;
  for (const std::string& m : modules) {
    // A QLoRA run's base is 4-bit (quant/qlora.h: the codes in "weight", scales beside them).
    if (file.find(m + ".weight_absmax")) {
      throw std::invalid_argument(fmt::format(
          "{}: '{}' is a 4-bit QLoRA base (qlora-nf4/qlora-int4); adapters are not merged into "
          "4-bit weights: merge the adapter (--lora-out, PEFT's layout) into the unquantized base "
          "instead, as PEFT merges into a dequantized copy",
          source, m));
    }
    const Tensor w = tensor(m + ".weight"), a = tensor(m + ".lora_A.weight"),
                 b = tensor(m + ".lora_B.weight");
    if (w.dim() != 2 || a.dim() != 2 || b.dim() != 2 || a.size(0) != o.r || b.size(1) != o.r ||
        a.size(1) != w.size(1) || b.size(0) != w.size(0)) {
      throw std::invalid_argument(fmt::format(
          "{}: the adapter of '{}' (A {}, B {}) does not fit its weight {} with r={}", source, m,
          a.shape().str(), b.shape().str(), w.shape().str(), o.r));
    }
    const Tensor merged =
        (w.to(DType::fp32) + mul(matmul(b.to(DType::fp32), a.to(DType::fp32)), o.scaling()))
            .to(w.dtype());
    *file.find(m + ".weight") = to_safetensor(m + ".weight", merged);
  }
  std::erase_if(file.tensors, [](const SafeTensor& t) {
    return t.name.ends_with(".lora_A.weight") || t.name.ends_with(".lora_B.weight");
  });
  file.metadata.erase(kLoraMetadataKey);
}

}  // namespace mixp::nn
