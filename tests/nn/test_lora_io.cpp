// LoRA adapters in PEFT's layout (nn/lora_io.h): GPT-2's Hugging Face key names and
// adapter_config.json fields, a round trip, refused adapters, and merging into the base.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/llama.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora_io.h"
#include "mixp/nn/models.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {
namespace {

using mixp::test::error_of;
using mixp::test::TempDir;

std::shared_ptr<Module> tiny(const std::string& name) {
  return make_model(ModelConfig{.name = name, .width = 32, .layers = 2, .heads = 2, .context = 8,
                                .vocab = 20, .mlp_width = 64, .seed = 3});
}

// B non-zero, so that a round trip that lost B would show.
void randomize_b(Module& m, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  for (auto& [name, l] : lora_layers(m)) {
    Tensor w = lora_adapter_of(*l).b->weight();
    w.copy_(uniform(w.shape(), -0.1, 0.1, g));
  }
}

const LoraOptions kOpt = LoraOptions::parse("r=4,alpha=16,dropout=0.05,targets=qkv,mlp.proj");

TEST(LoraIo, Gpt2AdapterHasPeftNamesAndConfig) {
  TempDir dir;
  auto m = tiny("gpt2");
  apply_lora(*m, kOpt, 1);
  save_lora_adapter(*m, kOpt, dir / "ad", "gpt2");
  const SafeTensorsFile f = read_safetensors(dir / "ad" / "adapter_model.safetensors");
  ASSERT_EQ(f.tensors.size(), 8u);
  const SafeTensor* a = f.find("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
  const SafeTensor* b = f.find("base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{32, 4}));
  std::ifstream in(dir / "ad" / "adapter_config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 16.0);
  EXPECT_EQ(j["lora_dropout"], 0.05);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["fan_in_fan_out"], true);  // GPT-2's Conv1D
  EXPECT_EQ(j["use_rslora"], false);
  EXPECT_EQ(j["base_model_name_or_path"], "gpt2");
  EXPECT_EQ(j["target_modules"][0], "transformer.h.0.attn.c_attn");
  EXPECT_EQ(j["target_modules"].size(), 4u);
}

// LlamaForCausalLM's modules sit under "model." (PEFT: base_model.model.model.layers.N...), the
// head at the top; no fan_in_fan_out (nn.Linear stores [out, in]).
TEST(LoraIo, LlamaAdapterHasPeftNames) {
  TempDir dir;
  Generator gen(5);
  Llama m(llama_preset("llama-tiny"), gen);
  const LoraOptions opt = LoraOptions::parse("r=2,alpha=4,targets=q_proj,v_proj,lm_head");
  apply_lora(m, opt, 1);
  save_lora_adapter(m, opt, dir / "ad", "TinyLlama");
  const SafeTensorsFile f = read_safetensors(dir / "ad" / "adapter_model.safetensors");
  EXPECT_EQ(f.tensors.size(), 10u);
  EXPECT_TRUE(f.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(f.find("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"));
  EXPECT_TRUE(f.find("base_model.model.lm_head.lora_A.weight"));
  std::ifstream in(dir / "ad" / "adapter_config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["fan_in_fan_out"], false);
  // And back: the names resolve to the same modules.
  Generator gen2(6);
  Llama m2(llama_preset("llama-tiny"), gen2);
  EXPECT_NO_THROW(load_lora_adapter(m2, dir / "ad"));
  EXPECT_EQ(lora_layers(m2).size(), 5u);
}

TEST(LoraIo, RoundTripRestoresTheAdapters) {
  for (const char* model : {"gpt2", "gpt"}) {
    TempDir dir;
    auto m = tiny(model);
    apply_lora(*m, kOpt, 1);
    randomize_b(*m, 2);
    save_lora_adapter(*m, kOpt, dir / "ad");
    auto back = tiny(model);
    load_lora_adapter(*back, dir / "ad", 5);
    const LoraOptions o = read_lora_config(*back, dir / "ad");
    EXPECT_EQ(o.r, 4);
    EXPECT_EQ(o.alpha, 16);
    EXPECT_EQ(o.dropout, 0.05);
    EXPECT_EQ(o.targets, (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.mlp.proj",
                                                   "blocks.1.attn.qkv", "blocks.1.mlp.proj"}))
        << model;
    const auto want = m->named_parameters(), got = back->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].first, got[i].first);
      EXPECT_EQ(want[i].second.to_double_vector(), got[i].second.to_double_vector()) << want[i].first;
      EXPECT_EQ(want[i].second.requires_grad(), got[i].second.requires_grad()) << want[i].first;
    }
  }
}

TEST(LoraIo, RefusesAdaptersThatDoNotFit) {
  TempDir dir;
  auto m = tiny("gpt2");
  apply_lora(*m, kOpt, 1);
  save_lora_adapter(*m, kOpt, dir / "ad");
  // Another shape of model: the adapter's A has 32 columns, this model's c_attn takes 64.
  auto wide = make_model(ModelConfig{.name = "gpt2", .width = 64, .layers = 2, .heads = 2,
                                     .context = 8, .vocab = 20, .mlp_width = 64, .seed = 3});
  std::string e = error_of<std::invalid_argument>([&] { load_lora_adapter(*wide, dir / "ad"); });
  EXPECT_NE(e.find("has shape [4, 32] but r=4 on 'transformer.h.0.attn.c_attn' needs [4, 64]"),
            std::string::npos)
      << e;
  // Fewer layers: a key names a module the model does not have.
  auto shallow = make_model(ModelConfig{.name = "gpt2", .width = 32, .layers = 1, .heads = 2,
                                        .context = 8, .vocab = 20, .mlp_width = 64, .seed = 3});
  e = error_of<std::invalid_argument>([&] { load_lora_adapter(*shallow, dir / "ad"); });
  EXPECT_NE(e.find("this model has no Linear layer 'transformer.h.1.attn.c_attn'"),
            std::string::npos)
      << e;
  // A config of another PEFT method.
  {
    std::ofstream out(dir / "ad" / "adapter_config.json");
    out << R"({"peft_type": "IA3", "r": 4, "lora_alpha": 8})";
  }
  e = error_of<std::invalid_argument>([&] { load_lora_adapter(*tiny("gpt2"), dir / "ad"); });
  EXPECT_NE(e.find("peft_type is \"IA3\", not \"LORA\""), std::string::npos) << e;
  {
    std::ofstream out(dir / "ad" / "adapter_config.json");
    out << R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "bias": "all"})";
  }
  e = error_of<std::invalid_argument>([&] { load_lora_adapter(*tiny("gpt2"), dir / "ad"); });
  EXPECT_NE(e.find("bias \"all\" is not supported"), std::string::npos) << e;
}

TEST(LoraIo, MergeComputesTheAdaptedModel) {
  auto m = tiny("gpt");
  apply_lora(*m, kOpt, 1);
  randomize_b(*m, 4);
  m->eval();  // no dropout
  const Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  NoGradGuard ng;
  const Tensor want = (*m)(x);
  SafeTensorsFile f = to_safetensors(*m);
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              SafeTensorsFile g = f;
              merge_lora_tensors(g, "m.safetensors");
            }).find("no 'mixp.lora' metadata"),
            std::string::npos);
  f.metadata[kLoraMetadataKey] = kOpt.str();
  merge_lora_tensors(f, "m.safetensors");
  for (const auto& t : f.tensors) EXPECT_EQ(t.name.find("lora_"), std::string::npos) << t.name;
  auto base = tiny("gpt");
  base->eval();
  load_safetensors(*base, f, "merged");
  const auto a = want.to_double_vector(), b = (*base)(x).to_double_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
}

}  // namespace
}  // namespace mixp::nn
