// config.json of a Hugging Face LLaMA-family directory (nn/llama_hf.h): reading it as untrusted
// input, writing it as save_pretrained does, and the tensor names and shapes it implies.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "llama_hf_detail.h"

namespace mixp::nn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

fs::path checked_file_in(const fs::path& dir, const std::string& name, uint64_t max_bytes,
                         const std::string& what) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: {} '{}' {}", dir.string(), what, name, why));
  };
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos ||
      name.find(':') != std::string::npos) {
    fail("is not a plain file name inside the checkpoint directory");
  }
  const fs::path p = dir / name;
  std::error_code ec;
  const fs::file_status ls = fs::symlink_status(p, ec);
  if (ec || !fs::exists(ls)) fail("does not exist");
  if (fs::is_symlink(ls)) {
    // A symlink may point to another file of the directory, never out of it.
    const fs::path target = fs::weakly_canonical(p, ec);
    const fs::path root = fs::weakly_canonical(dir, ec);
    if (ec) fail("is a symlink that cannot be resolved");
    const fs::path rel = target.lexically_relative(root);
    if (rel.empty() || rel.is_absolute() || *rel.begin() == "..")
      fail(fmt::format("is a symlink to {}, outside the checkpoint directory", target.string()));
  }
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::is_regular_file(st)) fail("is not a regular file");
  const uint64_t size = fs::file_size(p, ec);
  if (ec) fail("cannot be read");
  if (max_bytes && size > max_bytes)
    fail(fmt::format("is {} bytes, more than the {} a {} may have", size, max_bytes, what));
  return p;
}

std::string read_small_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot be read", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::ordered_json llama_hf_config_json(const LlamaConfig& c, const std::string& model_type,
                                            DType dtype) {
  nlohmann::ordered_json j;
  const char* arch = model_type == "qwen2"     ? "Qwen2ForCausalLM"
                     : model_type == "mistral" ? "MistralForCausalLM"
                                               : "LlamaForCausalLM";
  j["architectures"] = {arch};
  if (model_type == "llama") {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.width;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.mlp_width;
  j["max_position_embeddings"] = c.context;
  j["model_type"] = model_type;
  j["num_attention_heads"] = c.heads;
  j["num_hidden_layers"] = c.layers;
  j["num_key_value_heads"] = c.kv();
  j["rms_norm_eps"] = c.rms_eps;
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::none) {
    j["rope_scaling"] = nullptr;
  } else if (s.type == RopeScaling::Type::linear) {
    j["rope_scaling"] = {{"factor", s.factor}, {"rope_type", "linear"}};
  } else {
    j["rope_scaling"] = {{"factor", s.factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings},
                         {"rope_type", "llama3"}};
  }
  j["rope_theta"] = c.rope_theta;
  if (model_type == "qwen2") j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = c.tied_head;
  j["torch_dtype"] = dtype == DType::fp32   ? "float32"
                     : dtype == DType::fp16 ? "float16"
                                            : "bfloat16";
  j["vocab_size"] = c.vocab;
  return j;
}

}  // namespace detail

namespace {

// Bounds on config.json's sizes: generous for every released model, small enough that no product
// of them overflows int64 and no table built from them alone (RoPE's) is a memory bomb.
constexpr int64_t kMaxVocab = 1 << 22, kMaxWidth = 1 << 17, kMaxLayers = 1 << 12,
                  kMaxHeads = 1 << 12, kMaxFfn = 1 << 19, kMaxContext = 1 << 20;
constexpr int64_t kMaxRopeTableBytes = int64_t(1) << 30;

struct Reader {
  const json& j;
  std::string source;
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw std::invalid_argument(fmt::format("{}: \"{}\" {}", source, key, why));
  }
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def) const {
    if (!has(key)) {
      if (def) return *def;
      fail(key, "is missing");
    }
    const json& v = j[key];
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi) ? hi + 1
                                                                                : v.get<int64_t>();
    if (x < lo || x > hi) fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, v.dump()));
    return x;
  }
  double real(const json& o, const char* key, double lo, double hi,
              std::optional<double> def) const {
    if (!o.contains(key) || o[key].is_null()) {
      if (def) return *def;
      fail(key, "is missing");
    }
    const json& v = o[key];
    if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi) || !std::isfinite(x))
      fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, v.dump()));
    return x;
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j[key].is_boolean()) fail(key, "must be true or false, got " + j[key].dump());
    return j[key].get<bool>();
  }
};

RopeScaling parse_rope_scaling(const Reader& r) {
  RopeScaling s;
  if (!r.has("rope_scaling")) return s;
  const json& o = r.j["rope_scaling"];
  if (!o.is_object()) r.fail("rope_scaling", "must be an object or null, got " + o.dump());
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    if (o.contains(k) && o[k].is_string()) {
      type = o[k].get<std::string>();
      break;
    }
  }
  if (type.empty()) r.fail("rope_scaling", "has no \"rope_type\" (or \"type\") string");
  if (type == "default") return s;
  const Reader sub{o, r.source + ": rope_scaling"};
  if (type == "linear") {
    s.type = RopeScaling::Type::linear;
    s.factor = sub.real(o, "factor", 1.0, 1e6, std::nullopt);
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::llama3;
    s.factor = sub.real(o, "factor", 1.0, 1e6, std::nullopt);
    s.low_freq_factor = sub.real(o, "low_freq_factor", 1e-6, 1e6, std::nullopt);
    s.high_freq_factor = sub.real(o, "high_freq_factor", 1e-6, 1e6, std::nullopt);
    s.original_max_position_embeddings =
        sub.integer("original_max_position_embeddings", 1, kMaxContext, std::nullopt);
    if (!(s.high_freq_factor > s.low_freq_factor))
      sub.fail("high_freq_factor", "must be larger than low_freq_factor");
  } else {
    r.fail("rope_scaling",
           fmt::format("has type '{}', which mixp does not support; supported: default, linear, "
                       "llama3 (\"dynamic\" rescales with the sequence length at run time)",
                       type));
  }
  return s;
}

}  // namespace

LlamaHfConfig read_llama_hf_config(const fs::path& dir) {
  const fs::path path = detail::checked_file_in(dir, "config.json", 1 << 20, "config file");
  const std::string source = path.string();
  json j;
  try {
    j = json::parse(detail::read_small_file(path));
  } catch (const json::exception& e) {
    throw std::invalid_argument(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  if (!j.is_object()) throw std::invalid_argument(source + ": not a JSON object");
  const Reader r{j, source};
  LlamaHfConfig out;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    r.fail("model_type", "is missing (expected \"llama\", \"mistral\" or \"qwen2\")");
  out.model_type = j["model_type"].get<std::string>();
  if (out.model_type != "llama" && out.model_type != "mistral" && out.model_type != "qwen2") {
    r.fail("model_type", fmt::format("is '{}'; mixp reads the LLaMA family: llama, mistral, qwen2",
                                     out.model_type));
  }
  LlamaConfig& c = out.model;
  c.vocab = r.integer("vocab_size", 1, kMaxVocab, std::nullopt);
  c.width = r.integer("hidden_size", 2, kMaxWidth, std::nullopt);
  c.mlp_width = r.integer("intermediate_size", 1, kMaxFfn, std::nullopt);
  c.layers = r.integer("num_hidden_layers", 1, kMaxLayers, std::nullopt);
  c.heads = r.integer("num_attention_heads", 1, kMaxHeads, std::nullopt);
  c.kv_heads = r.integer("num_key_value_heads", 1, kMaxHeads, c.heads);
  const int64_t def_context = out.model_type == "llama" ? 2048 : 32768;
  c.context = r.integer("max_position_embeddings", 1, kMaxContext, def_context);
  c.rms_eps = r.real(j, "rms_norm_eps", 1e-12, 0.5, 1e-6);
  c.rope_theta = r.real(j, "rope_theta", 1.0 + 1e-9, 1e12, 10000.0);
  c.tied_head = r.boolean("tie_word_embeddings", false);
  c.qkv_bias = out.model_type == "qwen2";
  c.rope_scaling = parse_rope_scaling(r);
  if (r.has("hidden_act") && !(j["hidden_act"].is_string() && j["hidden_act"] == "silu"))
    r.fail("hidden_act", "must be \"silu\" (SwiGLU), got " + j["hidden_act"].dump());
  if (r.boolean("attention_bias", false))
    r.fail("attention_bias", "is true: Llama's o_proj bias is not supported (Qwen2's q/k/v biases "
                             "are: model_type qwen2)");
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias", "is true: MLP biases are not supported");
  if (out.model_type == "qwen2" && r.boolean("use_sliding_window", false))
    r.fail("use_sliding_window", "is true: sliding-window attention is not supported");
  if (r.has("head_dim") && c.width % c.heads == 0 &&
      r.integer("head_dim", 1, kMaxWidth, std::nullopt) != c.width / c.heads) {
    r.fail("head_dim", fmt::format("must be hidden_size / num_attention_heads = {}",
                                   c.width / c.heads));
  }
  if (out.model_type == "mistral" && r.has("sliding_window")) {
    // Causal attention within the window equals ordinary causal attention for sequences that
    // fit in it: the context stops there.
    c.context = std::min(c.context, r.integer("sliding_window", 1, kMaxContext, std::nullopt));
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    if (m.rfind("mixp::nn::", 0) == 0) m = m.substr(m.find(": ") + 2);
    throw std::invalid_argument(fmt::format("{}: {}", source, m));
  }
  if (c.context * c.head_dim() * 4 > kMaxRopeTableBytes) {
    throw std::invalid_argument(fmt::format(
        "{}: max_position_embeddings {} with head dim {} makes RoPE tables above {} bytes", source,
        c.context, c.head_dim(), kMaxRopeTableBytes));
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_hf_tensor_shapes(
    const LlamaConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t C = c.width, kvw = c.kv() * c.head_dim(), F = c.mlp_width;
  t.push_back({"model.embed_tokens.weight", {c.vocab, C}});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    t.push_back({p + "self_attn.q_proj.weight", {C, C}});
    if (c.qkv_bias) t.push_back({p + "self_attn.q_proj.bias", {C}});
    t.push_back({p + "self_attn.k_proj.weight", {kvw, C}});
    if (c.qkv_bias) t.push_back({p + "self_attn.k_proj.bias", {kvw}});
    t.push_back({p + "self_attn.v_proj.weight", {kvw, C}});
    if (c.qkv_bias) t.push_back({p + "self_attn.v_proj.bias", {kvw}});
    t.push_back({p + "self_attn.o_proj.weight", {C, C}});
    t.push_back({p + "mlp.gate_proj.weight", {F, C}});
    t.push_back({p + "mlp.up_proj.weight", {F, C}});
    t.push_back({p + "mlp.down_proj.weight", {C, F}});
    t.push_back({p + "input_layernorm.weight", {C}});
    t.push_back({p + "post_attention_layernorm.weight", {C}});
  }
  t.push_back({"model.norm.weight", {C}});
  if (!c.tied_head) t.push_back({"lm_head.weight", {c.vocab, C}});
  return t;
}

}  // namespace mixp::nn
