// Hugging Face LLaMA-family directories (nn/llama_hf.h; issue 31 item 3 and 5): a round trip in
// every dtype and layout, the clear errors of a wrong, incomplete or hostile directory (a Qwen
// checkpoint with a Llama config, a missing shard, a truncated file, shard names leaving the
// directory, a config whose sizes would allocate terabytes), and a fuzz of 1200 mutated
// directories that must each load or end in one std::invalid_argument line, never a crash.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/temp_dir.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/llama_hf.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/tensor/factories.h"

namespace mixp::test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

nn::LlamaConfig tiny(bool qwen = false) {
  nn::LlamaConfig c;
  c.vocab = 40;
  c.context = 16;
  c.width = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_width = 24;
  c.qkv_bias = qwen;
  c.rope_scaling = {.type = nn::RopeScaling::Type::llama3, .factor = 4.0, .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0, .original_max_position_embeddings = 8};
  return c;
}

std::shared_ptr<nn::Llama> model_of(const nn::LlamaConfig& c, uint64_t seed = 1) {
  Generator g(seed);
  return std::make_shared<nn::Llama>(c, g);
}

// The error of read_llama_hf(dir), "" when it loads.
std::string error_of(const fs::path& dir) {
  try {
    nn::read_llama_hf(dir);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}
void write_json(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(2);
}

double max_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

TEST(LlamaHf, RoundTripEveryDtypeAndLayout) {
  TempDir dir;
  for (bool qwen : {false, true}) {
    auto m = model_of(tiny(qwen));
    const Tensor x = from_vector(std::vector<int64_t>{1, 5, 9, 39, 0, 7}, {2, 3});
    NoGradGuard ng;
    const Tensor want = (*m)(x);
    for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
      for (uint64_t shard : {uint64_t(2048), uint64_t(1) << 30}) {
        const fs::path out = dir / fmt::format("{}_{}_{}", qwen, name(dt), shard);
        nn::write_llama_hf(*m, out, {.dtype = dt, .max_shard_bytes = shard, .model_type = ""});
        const json cfg = read_json(out / "config.json");
        EXPECT_EQ(cfg["model_type"], qwen ? "qwen2" : "llama");
        EXPECT_EQ(cfg["num_key_value_heads"], 2);
        EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "llama3");
        const bool sharded = shard < 4096;
        EXPECT_EQ(fs::exists(out / "model.safetensors.index.json"), sharded);
        if (sharded) {
          const json idx = read_json(out / "model.safetensors.index.json");
          EXPECT_TRUE(idx["weight_map"].contains("model.layers.1.mlp.down_proj.weight"));
          const std::string last = idx["weight_map"]["lm_head.weight"];
          EXPECT_TRUE(fs::exists(out / ("model-00001-of-" + last.substr(15)))) << last;
        }
        auto back = nn::read_llama_hf(out);
        EXPECT_EQ(back->config().qkv_bias, qwen);
        EXPECT_EQ(back->config().rope_scaling.type, nn::RopeScaling::Type::llama3);
        const double tol = dt == DType::fp32 ? 0.0 : 0.05 * max_diff(want, zeros(want.shape()));
        EXPECT_LE(max_diff((*back)(x), want), tol) << name(dt) << " " << shard;
      }
    }
  }
}

// A valid sharded directory to break.
fs::path good(const TempDir& dir, const std::string& name = "good", bool qwen = false) {
  const fs::path out = dir / name;
  nn::write_llama_hf(*model_of(tiny(qwen)), out,
                     {.dtype = DType::bf16, .max_shard_bytes = 3000, .model_type = ""});
  return out;
}

void expect_error(const fs::path& d, const std::string& part) {
  const std::string e = error_of(d);
  EXPECT_NE(e.find(part), std::string::npos) << "error: " << (e.empty() ? "(loaded)" : e);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(LlamaHf, ClearErrors) {
  TempDir dir;
  // A Qwen2 checkpoint (q/k/v biases) with a Llama config.
  fs::path d = good(dir, "qwen", true);
  json cfg = read_json(d / "config.json");
  cfg["model_type"] = "llama";
  write_json(d / "config.json", cfg);
  expect_error(d, "_proj.bias, which config.json has no place for (q/k/v biases are Qwen2's");
  // A Llama checkpoint with a Qwen2 config: the biases are missing.
  d = good(dir, "llama");
  cfg = read_json(d / "config.json");
  cfg["model_type"] = "qwen2";
  write_json(d / "config.json", cfg);
  expect_error(d, "has no tensor model.layers.0.self_attn.q_proj.bias");
  // A missing shard.
  d = good(dir, "missing");
  const std::string last =
      read_json(d / "model.safetensors.index.json")["weight_map"]["lm_head.weight"];
  fs::remove(d / ("model-00002-of-" + last.substr(15)));
  expect_error(d, "shard 'model-00002-of-");
  // A truncated shard.
  d = good(dir, "truncated");
  const fs::path s1 = d / read_json(d / "model.safetensors.index.json")["weight_map"]
                              ["model.embed_tokens.weight"].get<std::string>();
  fs::resize_file(s1, fs::file_size(s1) - 7);
  expect_error(d, s1.filename().string());
  // Shard names that leave the directory, absolute ones, and symlinks out of it.
  for (const std::string bad : {"../x.safetensors", "/etc/passwd", "sub/model.safetensors", ".."}) {
    d = good(dir, "escape");
    json idx = read_json(d / "model.safetensors.index.json");
    idx["weight_map"]["model.norm.weight"] = bad;
    write_json(d / "model.safetensors.index.json", idx);
    expect_error(d, "is not a plain file name inside the checkpoint directory");
    fs::remove_all(d);
  }
  d = good(dir, "symlink");
  const json idx = read_json(d / "model.safetensors.index.json");
  const std::string first = idx["weight_map"]["model.embed_tokens.weight"];
  fs::copy_file(d / first, dir / "outside.safetensors");
  fs::remove(d / first);
  fs::create_symlink(dir / "outside.safetensors", d / first);
  expect_error(d, "outside the checkpoint directory");
  // A symlink inside the directory is fine.
  fs::remove(d / first);
  fs::copy_file(dir / "outside.safetensors", d / "real.safetensors");
  fs::create_symlink("real.safetensors", d / first);
  EXPECT_EQ(error_of(d), "");
  // A config that would allocate terabytes is refused from the tensor shapes, before allocation.
  d = good(dir, "bomb");
  cfg = read_json(d / "config.json");
  cfg["vocab_size"] = 4194304;
  cfg["hidden_size"] = 131072;
  cfg["num_attention_heads"] = 1024;
  cfg["num_key_value_heads"] = 1024;
  write_json(d / "config.json", cfg);
  expect_error(d, "model.embed_tokens.weight has shape [40, 16] but config.json implies [4194304, 131072]");
  // Unsupported variants name what is supported.
  d = good(dir, "dynamic");
  cfg = read_json(d / "config.json");
  cfg["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  write_json(d / "config.json", cfg);
  expect_error(d, "has type 'dynamic', which mixp does not support; supported: default, linear, llama3");
  cfg["rope_scaling"] = nullptr;
  cfg["model_type"] = "gpt2";
  write_json(d / "config.json", cfg);
  expect_error(d, "mixp reads the LLaMA family: llama, mistral, qwen2");
  expect_error(dir / "nothing", "config.json' does not exist");
}

// 1200 mutated directories: config.json, the index and the shards.
TEST(LlamaHf, FuzzMutatedDirectoriesEndInClearErrors) {
  TempDir dir;
  const fs::path base = good(dir, "base");
  const json cfg0 = read_json(base / "config.json");
  const json idx0 = read_json(base / "model.safetensors.index.json");
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(base))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  std::mt19937_64 rng(31);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  const std::vector<json> values = {nullptr, -1, 0, 1, 3, 7, 1e300, -1e300, 0.5, "x", true,
                                    json::array(), json::object(), int64_t(1) << 62,
                                    uint64_t(18446744073709551615ull), 4096, 65536};
  int loaded = 0, refused = 0;
  for (int it = 0; it < 1200; ++it) {
    const fs::path d = dir / "m";
    fs::remove_all(d);
    fs::copy(base, d);
    const int kind = int(pick(3));
    if (kind == 0) {  // config.json
      json c = cfg0;
      const int op = int(pick(4));
      auto keys = std::vector<std::string>();
      for (auto& [k, v] : c.items()) keys.push_back(k);
      const std::string k = keys[pick(keys.size())];
      if (op == 0) c[k] = values[pick(values.size())];
      if (op == 1) c.erase(k);
      if (op == 2) c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", values[pick(values.size())]},
                                        {"low_freq_factor", 1}, {"high_freq_factor", values[pick(values.size())]},
                                        {"original_max_position_embeddings", values[pick(values.size())]}};
      std::string text = c.dump();
      if (op == 3) text = text.substr(0, pick(text.size()));
      std::ofstream(d / "config.json") << text;
    } else if (kind == 1) {  // the index
      json idx = idx0;
      auto& wm = idx["weight_map"];
      std::vector<std::string> names;
      for (auto& [k, v] : wm.items()) names.push_back(k);
      const std::string n = names[pick(names.size())];
      const int op = int(pick(5));
      const std::vector<json> shard_names = {"../base/" + shards[0], "/dev/zero", "", ".", "..",
                                             "nothere.safetensors", "config.json", shards[pick(shards.size())],
                                             42, nullptr, "a\\b.safetensors"};
      if (op == 0) wm[n] = shard_names[pick(shard_names.size())];
      if (op == 1) wm.erase(n);
      if (op == 2) wm["model.extra.weight"] = shards[0];
      if (op == 3) idx["weight_map"] = values[pick(values.size())];
      std::string text = idx.dump();
      if (op == 4) text = text.substr(0, pick(text.size()));
      std::ofstream(d / "model.safetensors.index.json") << text;
    } else {  // a shard
      const fs::path s = d / shards[pick(shards.size())];
      std::string bytes = read_text(s);
      const int op = int(pick(4));
      if (op == 0) bytes.resize(pick(bytes.size()));
      if (op == 1 || op == 2) {  // flip a byte of the size or header (op 1), anywhere (op 2)
        const size_t limit = op == 1 ? std::min<size_t>(bytes.size(), 200) : bytes.size();
        bytes[pick(limit)] ^= char(1 << pick(8));
      }
      if (op == 3) bytes += std::string(1 + pick(64), '\0');
      std::ofstream(s, std::ios::binary | std::ios::trunc) << bytes;
    }
    try {
      nn::read_llama_hf(d);
      ++loaded;
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_FALSE(m.empty());
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      ++refused;
    }
  }
  EXPECT_EQ(loaded + refused, 1200);
  EXPECT_GT(refused, 600);  // most mutations break something
}

TEST(LlamaPresets, ShapesAndParameterCounts) {
  // The parameter counts of the released checkpoints.
  EXPECT_EQ(nn::llama_preset("smollm-135m").parameter_count(), 134515008);
  EXPECT_EQ(nn::llama_preset("tinyllama-1.1b").parameter_count(), 1100048384);
  EXPECT_EQ(nn::llama_preset("llama2-7b").parameter_count(), 6738415616);
  auto m = nn::llama_preset("llama-tiny");
  EXPECT_EQ(model_of(m)->num_parameters(), m.parameter_count());
  EXPECT_THROW(nn::llama_preset("llama-70b"), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::test
