// Hugging Face LLaMA-family directories (nn/llama_hf.h): validating a checkpoint before anything
// is allocated, loading it shard by shard, and writing one as save_pretrained does.
#include "mixp/nn/llama_hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <stdexcept>

#include "llama_hf_detail.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/serialize.h"

namespace mixp::nn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// Where each expected tensor lives: shard file name -> the HF names it must hold.
struct Plan {
  std::map<std::string, std::vector<std::string>> shards;
};

// Tensors older checkpoints carry that are not parameters (RoPE's inverse frequencies).
bool ignorable(const std::string& name, const LlamaConfig& c) {
  if (name.size() > 28 && name.ends_with(".self_attn.rotary_emb.inv_freq")) return true;
  return c.tied_head && name == "lm_head.weight";  // some writers keep the tied copy
}

std::string hint_for_extra(const std::string& name, const LlamaConfig& c) {
  if (!c.qkv_bias && name.ends_with("_proj.bias") && name.find("self_attn") != std::string::npos)
    return " (q/k/v biases are Qwen2's: is config.json's model_type really not qwen2?)";
  if (name == "lm_head.weight") return " (config.json says tie_word_embeddings)";
  return "";
}

// Checks every shard header against the config; returns the plan of what to read where.
Plan validate_dir(const fs::path& dir, const LlamaConfig& cfg) {
  const auto expected = llama_hf_tensor_shapes(cfg);
  std::map<std::string, std::vector<int64_t>> want(expected.begin(), expected.end());
  Plan plan;
  std::error_code ec;
  std::map<std::string, std::string> where;  // tensor -> shard
  if (fs::exists(fs::symlink_status(dir / kSingle, ec))) {
    for (const auto& [n, s] : expected) where[n] = kSingle;
  } else if (fs::exists(fs::symlink_status(dir / kIndex, ec))) {
    const fs::path ip = detail::checked_file_in(dir, kIndex, 64u << 20, "index");
    json j;
    try {
      j = json::parse(detail::read_small_file(ip));
    } catch (const json::exception& e) {
      throw std::invalid_argument(fmt::format("{}: not valid JSON ({})", ip.string(), e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw std::invalid_argument(ip.string() + ": has no \"weight_map\" object");
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string())
        throw std::invalid_argument(
            fmt::format("{}: weight_map[\"{}\"] is not a file name string", ip.string(), name));
      where[name] = shard.get<std::string>();
    }
  } else {
    throw std::invalid_argument(fmt::format(
        "{}: has neither {} nor {} (a Hugging Face checkpoint directory has one)", dir.string(),
        kSingle, kIndex));
  }
  for (const auto& [name, shape] : expected) {
    if (!where.count(name))
      throw std::invalid_argument(
          fmt::format("{}: the checkpoint has no tensor {} (shape [{}]) that config.json implies",
                      dir.string(), name, fmt::join(shape, ", ")));
  }
  for (const auto& [name, shard] : where) {
    if (!want.count(name) && !ignorable(name, cfg))
      throw std::invalid_argument(fmt::format(
          "{}: the checkpoint holds {}, which config.json has no place for{}", dir.string(), name,
          hint_for_extra(name, cfg)));
    plan.shards[shard];  // every shard named is checked, even for ignorable tensors
    if (want.count(name)) plan.shards[shard].push_back(name);
  }
  for (auto& [shard, names] : plan.shards) {
    const fs::path sp = detail::checked_file_in(dir, shard, 0, "shard");
    if (sp.extension() != ".safetensors")
      throw std::invalid_argument(
          fmt::format("{}: shard '{}' is not a .safetensors file", dir.string(), shard));
    SafeTensorsHeader h;
    try {
      h = read_safetensors_header(sp);
    } catch (const std::exception& e) {
      throw std::invalid_argument(e.what());
    }
    std::map<std::string, const SafeTensorInfo*> in;
    for (const auto& t : h.tensors) in[t.name] = &t;
    for (const auto& t : h.tensors) {
      auto w = where.find(t.name);
      if (w == where.end()) {
        if (ignorable(t.name, cfg)) continue;
        throw std::invalid_argument(fmt::format(
            "{}: holds {}, which {}{}", sp.string(), t.name,
            shard == kSingle ? "config.json has no place for" : "the index does not list",
            hint_for_extra(t.name, cfg)));
      }
      if (w->second != shard) continue;  // the index's copy is elsewhere; this one is unused
    }
    for (const std::string& name : names) {
      auto it = in.find(name);
      if (it == in.end())
        throw std::invalid_argument(
            fmt::format("{}: does not hold {}, which {} puts there", sp.string(), name,
                        shard == kSingle ? "config.json" : "the index"));
      const SafeTensorInfo& t = *it->second;
      if (t.dtype != DType::fp32 && t.dtype != DType::bf16 && t.dtype != DType::fp16)
        throw std::invalid_argument(fmt::format("{}: {} is stored as {}; mixp reads F32, BF16, F16",
                                                sp.string(), name, traits(t.dtype).safetensors));
      if (t.shape != want.at(name))
        throw std::invalid_argument(fmt::format(
            "{}: {} has shape [{}] but config.json implies [{}]", sp.string(), name,
            fmt::join(t.shape, ", "), fmt::join(want.at(name), ", ")));
    }
  }
  return plan;
}

// HF name -> the model's parameter name.
std::string param_name(const std::string& hf) {
  return hf.rfind("model.", 0) == 0 ? hf.substr(6) : hf;
}

void load_plan(Llama& model, const fs::path& dir, const Plan& plan) {
  NoGradGuard ng;
  for (const auto& [shard, names] : plan.shards) {
    if (names.empty()) continue;
    const fs::path sp = dir / shard;
    SafeTensorsFile f;
    try {
      f = read_safetensors(sp);
    } catch (const std::exception& e) {
      throw std::invalid_argument(e.what());  // changed since validation, or unreadable
    }
    for (const std::string& name : names) {
      const SafeTensor* s = f.find(name);
      Tensor p = model.parameter(param_name(name));
      if (!s || s->shape != std::vector<int64_t>(p.shape().begin(), p.shape().end()))
        throw std::invalid_argument(
            fmt::format("{}: {} changed while it was being read", sp.string(), name));
      copy_from_safetensor(p, *s);
    }
  }
}

}  // namespace

void load_llama_hf(Llama& model, const fs::path& dir) {
  const LlamaHfConfig hc = read_llama_hf_config(dir);
  const LlamaConfig& m = model.config();
  const LlamaConfig& c = hc.model;
  if (c.vocab != m.vocab || c.width != m.width || c.layers != m.layers || c.heads != m.heads ||
      c.kv() != m.kv() || c.mlp_width != m.mlp_width || c.tied_head != m.tied_head ||
      c.qkv_bias != m.qkv_bias) {
    auto shape = [](const LlamaConfig& x) {
      return fmt::format("vocab {}, width {}, layers {}, heads {}/{} k/v, mlp {}{}{}", x.vocab,
                         x.width, x.layers, x.heads, x.kv(), x.mlp_width,
                         x.tied_head ? ", tied head" : "", x.qkv_bias ? ", qkv bias" : "");
    };
    throw std::invalid_argument(fmt::format("{}: config.json's model ({}) is not this model ({})",
                                            dir.string(), shape(c), shape(m)));
  }
  load_plan(model, dir, validate_dir(dir, c));
}

std::shared_ptr<Llama> read_llama_hf(const fs::path& dir) {
  const LlamaHfConfig hc = read_llama_hf_config(dir);
  const Plan plan = validate_dir(dir, hc.model);  // before the model is allocated
  Generator gen(0);
  auto model = std::make_shared<Llama>(hc.model, gen);
  load_plan(*model, dir, plan);
  return model;
}

int write_llama_hf(const Llama& model, const fs::path& dir, const LlamaHfWriteOptions& opt) {
  const LlamaConfig& c = model.config();
  const std::string type =
      opt.model_type.empty() ? (c.qkv_bias ? "qwen2" : "llama") : opt.model_type;
  if (type != "llama" && type != "mistral" && type != "qwen2")
    throw std::invalid_argument("mixp::nn::write_llama_hf: model_type must be llama, mistral or "
                                "qwen2, got '" + type + "'");
  if (c.qkv_bias != (type == "qwen2"))
    throw std::invalid_argument(fmt::format(
        "mixp::nn::write_llama_hf: a model {} q/k/v biases cannot be written as model_type {}",
        c.qkv_bias ? "with" : "without", type));
  if (opt.dtype != DType::fp32 && opt.dtype != DType::bf16 && opt.dtype != DType::fp16)
    throw std::invalid_argument("mixp::nn::write_llama_hf: dtype must be fp32, bf16 or fp16");
  if (opt.max_shard_bytes == 0)
    throw std::invalid_argument("mixp::nn::write_llama_hf: max_shard_bytes must be positive");
  NoGradGuard ng;
  // Shards in HF's tensor order, a new one before a tensor that would overflow the current one.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& [name, shape] : llama_hf_tensor_shapes(c)) {
    Tensor t = model.parameter(param_name(name));
    const uint64_t bytes = uint64_t(t.numel()) * traits(opt.dtype).storage_bytes;
    if (in_shard > 0 && in_shard + bytes > opt.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, t);
    in_shard += bytes;
    total += bytes;
  }
  write_directory_atomic(dir, [&](const fs::path& staging) {
    LlamaConfig written = c;
    if (opt.max_position_embeddings > 0) written.context = opt.max_position_embeddings;
    write_text_atomic(staging / "config.json",
                      detail::llama_hf_config_json(written, type, opt.dtype).dump(2) + "\n");
    const size_t n = shards.size();
    json weight_map = json::object();
    for (size_t i = 0; i < n; ++i) {
      const std::string file = n == 1 ? std::string(kSingle)
                                      : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
      SafeTensorsFile f;
      f.metadata["format"] = "pt";
      for (const auto& [name, t] : shards[i]) {
        f.tensors.push_back(to_safetensor(name, t.detach().to(opt.dtype, Round::nearest_even)));
        weight_map[name] = file;
      }
      write_safetensors(staging / file, f);
    }
    if (n > 1) {
      json idx;
      idx["metadata"] = {{"total_size", total}};
      idx["weight_map"] = weight_map;  // nlohmann::json keeps keys sorted, as HF's sort_keys
      write_text_atomic(staging / kIndex, idx.dump(2) + "\n");
    }
  });
  return static_cast<int>(shards.size());
}

}  // namespace mixp::nn
