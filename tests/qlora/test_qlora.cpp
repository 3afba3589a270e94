// QLoRA (quant/qlora.h, the qlora-nf4 / qlora-int4 recipes, docs/lora.md "QLoRA"): the 4-bit base
// computes bf16(x) @ bf16(dequantize(quantize(W)))^T exactly, forward and input gradient; only the
// adapters get gradients and optimizer state; a few steps reduce the loss on gpt and llama; resume
// is bit-identical; gradient checkpointing gives the same adapters; a run without --lora is
// refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "mixp/backend/gemm.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/llama.h"
#include "mixp/nn/llama_hf.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/quant/qlora.h"
#include "mixp/quant/weight_only.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/trainer.h"
#include "train/resume_check.h"
#include "train/train_test_util.h"

namespace mixp {
namespace {

using train::TrainConfig;
using train::Trainer;

std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> v(size_t(t.numel()));
  std::memcpy(v.data(), t.contiguous().data_ptr(), v.size() * 2);
  return v;
}
std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.to(DType::fp32).contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

// The reference: bitsandbytes' pipeline written out with the format functions.
Tensor reference_weight_bf16(const std::vector<float>& w, int64_t out, int64_t in, Block4 kind,
                             std::vector<uint8_t>* codes_out) {
  const int64_t n = out * in;
  std::vector<uint8_t> codes(size_t(block4_data_bytes(n)));
  std::vector<float> scales(size_t(block4_num_blocks(n, 64)));
  block4_quantize(codes, scales, w, kind, 64, Round::nearest_even, 0);
  quant::double_quantize_scales(scales);  // scales now hold the decoded values
  std::vector<float> deq(static_cast<size_t>(n));
  block4_dequantize(deq, codes, scales, kind, 64);
  *codes_out = codes;
  return from_vector(deq, {out, in}).to(DType::bf16, Round::nearest_even);
}

void expect_forward_is_dequantized_gemm(Block4 kind) {
  // 160 x 128: 320 blocks of 64, so the double quantization has two blocks of 256 scales.
  const int64_t out = 160, in = 128;
  Generator gen(7);
  nn::Linear lin(in, out, gen);
  const std::vector<float> w = floats(lin.weight());
  const std::vector<float> b = floats(lin.bias());
  std::vector<uint8_t> ref_codes;
  const Tensor wb = reference_weight_bf16(w, out, in, kind, &ref_codes);

  quant::quantize_linear_4bit(lin, kind);
  ASSERT_TRUE(quant::is_4bit_linear(lin));
  // bnb's Params4bit: the parameter is the packed codes, nothing in fp32 remains.
  EXPECT_EQ(lin.weight().dtype(), DType::uint8);
  EXPECT_EQ(lin.weight().shape(), (Shape{out * in / 2, 1}));
  EXPECT_FALSE(lin.weight().requires_grad());
  EXPECT_EQ(std::memcmp(lin.weight().data_ptr(), ref_codes.data(), ref_codes.size()), 0);
  EXPECT_EQ(quant::weight_4bit_bytes(lin), out * in / 2 + 320 + 2 * 4 + 4);
  EXPECT_EQ(bits16(quant::dequantized_4bit_weight(lin)), bits16(wb));

  Tensor x = randn({3, 5, in}, gen);
  x.requires_grad_(true);
  Tensor y = lin(x);
  ASSERT_EQ(y.dtype(), DType::fp32);
  ASSERT_EQ(y.shape(), (Shape{3, 5, out}));
  Tensor ref = gemm(x.detach().reshape({15, in}).to(DType::bf16, Round::nearest_even), wb.t());
  std::vector<float> r = floats(ref);
  for (int64_t i = 0; i < 15; ++i)
    for (int64_t j = 0; j < out; ++j) r[size_t(i * out + j)] += b[size_t(j)];
  EXPECT_EQ(floats(y), r);
  // bf16 in, bf16 out (bnb returns the input's dtype).
  const Tensor yb = lin(x.detach().to(DType::bf16, Round::nearest_even));
  EXPECT_EQ(yb.dtype(), DType::bf16);
  EXPECT_EQ(bits16(yb), bits16(from_vector(r, {3, 5, out}).to(DType::bf16, Round::nearest_even)));

  // Input gradient: bf16(dy) @ W with W dequantized again.
  const Tensor g = randn({3, 5, out}, gen);
  sum(y * g).backward();
  const Tensor dx = gemm(g.reshape({15, out}).to(DType::bf16, Round::nearest_even), wb);
  EXPECT_EQ(floats(x.grad()), floats(dx));
  EXPECT_FALSE(lin.weight().grad().defined());
}

TEST(Qlora, Nf4ForwardAndInputGradientAreTheDequantizedBf16Gemm) {
  expect_forward_is_dequantized_gemm(Block4::nf4);
}
TEST(Qlora, Int4ForwardAndInputGradientAreTheDequantizedBf16Gemm) {
  expect_forward_is_dequantized_gemm(Block4::int4);
}

TEST(Qlora, QuantizesEveryLinearButTheHead) {
  auto model = nn::make_model(nn::ModelConfig{.name = "llama",
                                              .width = 32,
                                              .layers = 2,
                                              .heads = 4,
                                              .context = 8,
                                              .vocab = 50,
                                              .kv_heads = 2,
                                              .seed = 3});
  const auto names = quant::quantize_frozen_base(*model, Block4::nf4);
  EXPECT_EQ(names.size(), 14u);  // 2 layers x (q, k, v, o, gate, up, down)
  for (auto& [name, m] : model->named_modules()) {
    auto* lin = dynamic_cast<nn::Linear*>(m);
    if (!lin) continue;
    EXPECT_EQ(quant::is_4bit_linear(*lin), lin->kind() != "head") << name;
  }
  EXPECT_THROW(quant::quantize_frozen_base(*model, Block4::nf4), std::invalid_argument);
  // The run record's parameter count: the 4-bit weights count as their values.
  auto plain = nn::make_model(nn::ModelConfig{.name = "llama",
                                              .width = 32,
                                              .layers = 2,
                                              .heads = 4,
                                              .context = 8,
                                              .vocab = 50,
                                              .kv_heads = 2,
                                              .seed = 3});
  EXPECT_LT(model->num_parameters(), plain->num_parameters());
  EXPECT_EQ(quant::parameter_values(*model), plain->num_parameters());
}

TrainConfig qlora_run(const std::string& model, const std::string& precision) {
  TrainConfig c = train::testing::small_gpt(precision);
  c.model.name = model;
  if (model == "llama") {
    c.model.heads = 4;
    c.model.kv_heads = 2;
    c.lora = "r=4,alpha=8,dropout=0.1,targets=q_proj,v_proj,down_proj";
  } else {
    c.lora = "r=4,alpha=8,dropout=0.1,targets=qkv,fc";
  }
  c.lr = 1e-2;
  c.evaluate = false;
  return c;
}

void expect_only_adapters_train(const std::string& model, const std::string& precision) {
  TrainConfig c = qlora_run(model, precision);
  c.steps = 8;
  Trainer t(c);
  std::map<std::string, std::vector<double>> before;
  for (const auto& [name, p] : t.model().state_dict()) before[name] = p.to_double_vector();
  const train::TrainResult r = t.fit();
  ASSERT_EQ(r.losses.size(), 8u);
  // A few steps reduce the loss (the adapters learn the synthetic text's statistics).
  EXPECT_LT(r.losses.back(), r.losses.front() - 0.05) << model << " " << precision;
  size_t adapters = 0;
  for (const auto& [name, p] : t.model().state_dict()) {
    if (name.find(".lora_") != std::string::npos) {
      ++adapters;
      EXPECT_EQ(p.dtype(), DType::fp32) << name;  // fp32 masters
      continue;
    }
    EXPECT_EQ(p.to_double_vector(), before[name]) << model << ": " << name << " changed";
  }
  // The base Linear layers are 4-bit (bnb's uint8 codes and double-quantized scales).
  size_t four_bit = 0;
  for (const auto& [name, p] : t.model().state_dict())
    if (name.ends_with(".weight_absmax")) {
      ++four_bit;
      const std::string w = name.substr(0, name.size() - 7);  // "<layer>.weight"
      EXPECT_EQ(t.model().parameter(w).dtype(), DType::uint8) << w;
    }
  EXPECT_EQ(four_bit, model == "llama" ? 14u : 8u);
  EXPECT_EQ(t.optimizer().params().size(), adapters);
  for (const auto& [name, s] : t.optimizer().state_dict().tensors)
    EXPECT_NE(name.find(".lora_"), std::string::npos) << "optimizer state " << name;
  for (const auto& [name, p] : t.model().named_parameters()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), adapter) << name;
    EXPECT_EQ(p.grad().defined() && adapter, p.grad().defined()) << name << " has a gradient";
  }
}

TEST(Qlora, Nf4OnLlamaTrainsOnlyTheAdaptersAndLowersTheLoss) {
  expect_only_adapters_train("llama", "qlora-nf4");
}
TEST(Qlora, Int4OnGptTrainsOnlyTheAdaptersAndLowersTheLoss) {
  expect_only_adapters_train("gpt", "qlora-int4");
}

// From a Hugging Face directory (--init-from): the checkpoint's weights are what is quantized,
// and the adapters are attached (llama + --init-from once skipped --lora).
TEST(Qlora, StartsFromAHuggingFaceDirectory) {
  test::TempDir dir;
  Generator gen(5);
  nn::Llama src(nn::llama_preset("llama-tiny"), gen);
  nn::LlamaHfWriteOptions fp32;
  fp32.dtype = DType::fp32;
  nn::write_llama_hf(src, dir / "hf", fp32);
  TrainConfig c = qlora_run("llama", "qlora-nf4");
  c.init_from = (dir / "hf").string();
  c.model.width = c.model.layers = c.model.heads = c.model.kv_heads = 0;  // config.json's
  c.steps = 2;
  Trainer t(c);
  auto& q = dynamic_cast<nn::Linear&>(t.model().module("layers.1.self_attn.q_proj"));
  ASSERT_TRUE(quant::is_4bit_linear(q));
  EXPECT_NE(nn::lora_adapter_of(q).a, nullptr);
  EXPECT_EQ(nn::lora_layers(t.model()).size(), 6u);
  auto& src_q = dynamic_cast<nn::Linear&>(src.module("layers.1.self_attn.q_proj"));
  std::vector<uint8_t> codes;
  const Tensor want = reference_weight_bf16(floats(src_q.weight()), q.out_features(),
                                            q.in_features(), Block4::nf4, &codes);
  EXPECT_EQ(bits16(quant::dequantized_4bit_weight(q)), bits16(want));
  t.fit();
}

TEST(Qlora, ResumeIsBitIdentical) {
  train::testing::expect_resume_identical(qlora_run("llama", "qlora-nf4"), 2);
}

TEST(Qlora, GradientCheckpointingGivesTheSameAdapters) {
  TrainConfig c = qlora_run("llama", "qlora-nf4");
  c.steps = 3;
  Trainer plain(c);
  plain.fit();
  c.model.checkpointing = true;
  Trainer ck(c);
  ck.fit();
  const auto a = plain.model().state_dict(), b = ck.model().state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_double_vector(), b[i].second.to_double_vector()) << a[i].first;
}

// `mixp convert` of a QLoRA checkpoint: no merge into 4-bit weights, a clear error (exit 1).
TEST(Qlora, ConvertRefusesToMergeIntoTheFourBitBase) {
  test::TempDir dir;
  const std::string ck = (dir / "ck").string();
  auto r = train::testing::run_cli(
      "train --model gpt --width 32 --layers 1 --heads 2 --context 16 --data synthetic "
      "--train-limit 5000 --steps 1 --threads 1 --no-eval --precision qlora-nf4 "
      "--lora r=2,targets=qkv --save '" +
      ck + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train::testing::run_cli("convert '" + ck + "/model.safetensors' -o '" +
                              (dir / "m.safetensors").string() + "' --layout hf");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("'blocks.0.attn.qkv' is a 4-bit QLoRA base"), std::string::npos) << r.err;
}

TEST(Qlora, WithoutLoraIsRefused) {
  TrainConfig c = qlora_run("gpt", "qlora-nf4");
  c.lora.clear();
  const std::string e = test::error_of<train::ConfigError>([&] { Trainer t(c); });
  EXPECT_NE(e.find("--precision qlora-nf4 trains LoRA adapters on a frozen 4-bit base: give "
                   "--lora"),
            std::string::npos)
      << e;
  const auto r = train::testing::run_cli(
      "train --model gpt --width 32 --layers 1 --heads 2 --context 16 --data synthetic "
      "--train-limit 5000 --steps 1 --threads 1 --precision qlora-int4");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("mixp train: error: --precision qlora-int4 trains LoRA adapters"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mixp
