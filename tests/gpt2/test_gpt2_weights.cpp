// GPT-2 presets and weights layouts (nn/models.h, nn/gpt2_weights.h): the real sizes, GPT-2's
// init, the tied head, llm.c's model file byte for byte (header and parameter order of its
// train_gpt2.c), Hugging Face export, round trips, and the errors for files that are not GPT-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/temp_dir.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/models.h"
#include "mixp/nn/serialize.h"
#include "mixp/tensor/factories.h"

namespace mixp::test {
namespace {

constexpr int64_t V = 100, T = 32, C = 64, L = 2, H = 2;

std::shared_ptr<nn::Gpt> tiny(uint64_t seed, int64_t vocab = V) {
  return std::dynamic_pointer_cast<nn::Gpt>(nn::make_model({.name = "gpt2",
                                                            .width = C,
                                                            .layers = L,
                                                            .heads = H,
                                                            .context = T,
                                                            .vocab = vocab,
                                                            .seed = seed}));
}

std::vector<float> floats(const Tensor& t) {
  const Tensor f = t.to(DType::fp32).contiguous();
  return {f.data<float>(), f.data<float>() + f.numel()};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gpt2Model, RealSizesCountLikeLlmc) {
  // llm.c's train_gpt2.c prints num_parameters 124475904 for GPT-2 124M (vocab padded to 50304).
  auto m = nn::make_model({.name = "gpt2"});
  EXPECT_EQ(m->num_parameters(), 124475904);
  auto& g = dynamic_cast<nn::Gpt&>(*m);
  EXPECT_EQ(g.config().vocab, 50257);
  EXPECT_EQ(g.embedding_rows(), 50304);
  const nn::ModelConfig medium = nn::resolve_model_config({.name = "gpt2-medium"});
  EXPECT_EQ(medium.width, 1024);
  EXPECT_EQ(medium.layers, 24);
  EXPECT_EQ(medium.heads, 16);
  EXPECT_EQ(medium.mlp_width, 4096);
  EXPECT_EQ(medium.context, 1024);
}

TEST(Gpt2Model, TiedHeadPaddedVocabAndInit) {
  auto m = tiny(3);
  const auto names = m->named_parameters();
  EXPECT_EQ(names.front().first, "tok_emb.weight");
  for (const auto& [n, p] : names) EXPECT_NE(n, "head.weight") << "the head is tied";
  EXPECT_EQ(m->parameter("tok_emb.weight").size(0), 128);  // 100 padded to 64s
  const auto emb = floats(m->parameter("tok_emb.weight"));
  for (int64_t i = V * C; i < 128 * C; ++i) ASSERT_EQ(emb[size_t(i)], 0.0f) << "padded row";
  const Tensor logits = (*m)(zeros({2, 8}, {.dtype = DType::int32}));
  EXPECT_EQ(logits.shape(), Shape({2, 8, V}));
  // GPT-2's init: std 0.02, residual projections 0.02 / sqrt(2 * layers).
  auto deep = nn::make_model({.name = "gpt2",
                              .width = 128,
                              .layers = 8,
                              .heads = 2,
                              .context = 16,
                              .vocab = 64,
                              .seed = 1});
  auto std_of = [&](const std::string& n) {
    const auto v = floats(deep->parameter(n));
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
  };
  EXPECT_NEAR(std_of("blocks.0.attn.qkv.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("blocks.0.mlp.proj.weight"), 0.02 / 4.0, 0.0005);
  EXPECT_NEAR(std_of("blocks.3.attn.proj.weight"), 0.02 / 4.0, 0.0005);
  EXPECT_NEAR(std_of("tok_emb.weight"), 0.02, 0.002);
}

// Offsets of llm.c's 16 tensors for this config, from its fill_in_parameter_sizes.
std::vector<int64_t> llmc_sizes(int64_t vp) {
  return {vp * C, T * C, L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
          L * C,  L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
}

TEST(Gpt2Weights, LlmcFileIsLlmcsLayout) {
  TempDir dir;
  auto m = tiny(11);
  nn::write_gpt2_weights(nn::gpt2_weights_of(*m), dir / "m.bin", nn::Gpt2Layout::llmc);
  const auto bytes = read_bytes(dir / "m.bin");
  int32_t h[256];
  ASSERT_GE(bytes.size(), sizeof h);
  std::memcpy(h, bytes.data(), sizeof h);
  EXPECT_EQ(h[0], 20240326);
  EXPECT_EQ(h[1], 3);  // fp32
  EXPECT_EQ(h[2], T);
  EXPECT_EQ(h[3], V);
  EXPECT_EQ(h[4], L);
  EXPECT_EQ(h[5], H);
  EXPECT_EQ(h[6], C);
  EXPECT_EQ(h[7], 128);
  const auto sizes = llmc_sizes(128);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  ASSERT_EQ(bytes.size(), 1024 + size_t(total) * 4);
  auto at = [&](int tensor, int64_t index) {
    int64_t off = 0;
    for (int i = 0; i < tensor; ++i) off += sizes[size_t(i)];
    float f;
    std::memcpy(&f, bytes.data() + 1024 + size_t(off + index) * 4, 4);
    return f;
  };
  // Layer 1's slice of each stacked tensor follows layer 0's.
  EXPECT_EQ(at(0, 5 * C + 3), floats(m->parameter("tok_emb.weight"))[5 * C + 3]);
  EXPECT_EQ(at(1, 7), floats(m->parameter("pos_emb.weight"))[7]);
  EXPECT_EQ(at(4, 3 * C * C + 17), floats(m->parameter("blocks.1.attn.qkv.weight"))[17]);
  EXPECT_EQ(at(5, 3 * C + 2), floats(m->parameter("blocks.1.attn.qkv.bias"))[2]);
  EXPECT_EQ(at(6, 9), floats(m->parameter("blocks.0.attn.proj.weight"))[9]);
  EXPECT_EQ(at(10, 4 * C * C + 5), floats(m->parameter("blocks.1.mlp.fc.weight"))[5]);
  EXPECT_EQ(at(12, 4 * C * C + 6), floats(m->parameter("blocks.1.mlp.proj.weight"))[6]);
  EXPECT_EQ(at(14, 1), floats(m->parameter("ln_f.weight"))[1]);
  EXPECT_EQ(at(0, V * C), 0.0f) << "padded rows are written as zeros";
}

TEST(Gpt2Weights, RoundTripsThroughEveryLayout) {
  TempDir dir;
  auto src = tiny(21);
  const nn::Gpt2Weights w = nn::gpt2_weights_of(*src);
  nn::write_gpt2_weights(w, dir / "a.bin", nn::Gpt2Layout::llmc);
  nn::write_gpt2_weights(nn::read_gpt2_weights(dir / "a.bin"), dir / "b.safetensors",
                         nn::Gpt2Layout::hf);
  EXPECT_EQ(nn::detect_gpt2_layout(dir / "b.safetensors"), nn::Gpt2Layout::hf);
  nn::write_gpt2_weights(nn::read_gpt2_weights(dir / "b.safetensors", H), dir / "c.safetensors",
                         nn::Gpt2Layout::mixp);
  EXPECT_EQ(nn::detect_gpt2_layout(dir / "c.safetensors"), nn::Gpt2Layout::mixp);
  auto dst = tiny(99);
  nn::load_gpt2_weights(*dst, nn::read_gpt2_weights(dir / "c.safetensors"), "c.safetensors");
  for (const auto& [name, p] : src->named_parameters()) {
    EXPECT_EQ(floats(p), floats(dst->parameter(name))) << name;
  }
  // The mixp layout is the model's own state: nn::load reads it as well.
  auto again = tiny(5);
  nn::load(*again, dir / "c.safetensors");
  EXPECT_EQ(floats(again->parameter("blocks.1.mlp.fc.weight")),
            floats(src->parameter("blocks.1.mlp.fc.weight")));
}

TEST(Gpt2Weights, HuggingFaceExportUsesConv1dLayout) {
  TempDir dir;
  auto m = tiny(4);
  nn::write_gpt2_weights(nn::gpt2_weights_of(*m), dir / "hf.safetensors", nn::Gpt2Layout::hf,
                         DType::bf16);
  const SafeTensorsFile f = read_safetensors(dir / "hf.safetensors");
  const SafeTensor* wte = f.find("wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{V, C}));  // unpadded, as Hugging Face's
  EXPECT_EQ(wte->dtype, DType::bf16);
  const SafeTensor* fc = f.find("h.1.mlp.c_fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape, (std::vector<int64_t>{C, 4 * C}));  // [in, out]
  Tensor t = empty({C, 4 * C}, {.dtype = DType::bf16});
  nn::copy_from_safetensor(t, *fc);
  const auto got = floats(t);
  const auto want =
      floats(m->parameter("blocks.1.mlp.fc.weight").to(DType::bf16, Round::nearest_even));
  for (int64_t o = 0; o < 4 * C; o += 37)
    for (int64_t i = 0; i < C; i += 5)
      ASSERT_EQ(got[size_t(i * 4 * C + o)], want[size_t(o * C + i)]);
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Gpt2Weights, LlmcBf16IsVersion5AndHalfTheBytes) {
  TempDir dir;
  auto m = tiny(8);
  const nn::Gpt2Weights w = nn::gpt2_weights_of(*m);
  nn::write_gpt2_weights(w, dir / "f.bin", nn::Gpt2Layout::llmc);
  nn::write_gpt2_weights(w, dir / "h.bin", nn::Gpt2Layout::llmc, DType::bf16);
  const auto b = read_bytes(dir / "h.bin");
  int32_t version;
  std::memcpy(&version, b.data() + 4, 4);
  EXPECT_EQ(version, 5);
  EXPECT_EQ(b.size() - 1024, (read_bytes(dir / "f.bin").size() - 1024) / 2);
  const nn::Gpt2Weights r = nn::read_gpt2_weights(dir / "h.bin");
  EXPECT_EQ(r.tensors.find("ln_f.bias")->dtype, DType::bf16);
  auto dst = tiny(1);
  nn::load_gpt2_weights(*dst, r, "h.bin");
  EXPECT_EQ(floats(dst->parameter("blocks.0.attn.qkv.weight")),
            floats(m->parameter("blocks.0.attn.qkv.weight").to(DType::bf16, Round::nearest_even)));
  EXPECT_NE(error_of([&] {
              nn::write_gpt2_weights(w, dir / "x.bin", nn::Gpt2Layout::llmc, DType::fp16);
            }).find("fp32 (version 3) or bf16 (version 5)"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.bin"));
}

TEST(Gpt2Weights, ErrorsNameTheFirstMissingOrMisshapedTensor) {
  TempDir dir;
  auto m = tiny(2);
  nn::write_gpt2_weights(nn::gpt2_weights_of(*m), dir / "hf.safetensors", nn::Gpt2Layout::hf);
  SafeTensorsFile f = read_safetensors(dir / "hf.safetensors");
  SafeTensorsFile missing = f;
  std::erase_if(missing.tensors, [](const SafeTensor& s) { return s.name == "h.1.mlp.c_fc.bias"; });
  write_safetensors(dir / "missing.safetensors", missing);
  EXPECT_NE(error_of([&] {
              nn::read_gpt2_weights(dir / "missing.safetensors");
            }).find("has no tensor 'h.1.mlp.c_fc.bias'"),
            std::string::npos);
  SafeTensorsFile bad = f;
  for (auto& s : bad.tensors) {
    if (s.name == "h.0.attn.c_proj.weight") {
      s.shape = {C / 2, 2 * C};
    }
  }
  write_safetensors(dir / "bad.safetensors", bad);
  const std::string e = error_of([&] { nn::read_gpt2_weights(dir / "bad.safetensors"); });
  EXPECT_NE(e.find("'h.0.attn.c_proj.weight' has shape [32, 128]"), std::string::npos) << e;
  // Not GPT-2 at all.
  SafeTensorsFile other;
  other.tensors.push_back(nn::to_safetensor("fc1.weight", zeros({2, 2})));
  write_safetensors(dir / "other.safetensors", other);
  EXPECT_NE(error_of([&] {
              nn::read_gpt2_weights(dir / "other.safetensors");
            }).find("not a GPT-2 checkpoint (its first tensor is 'fc1.weight')"),
            std::string::npos);
  // A truncated llm.c file.
  nn::write_gpt2_weights(nn::gpt2_weights_of(*m), dir / "m.bin", nn::Gpt2Layout::llmc);
  auto bytes = read_bytes(dir / "m.bin");
  bytes.resize(bytes.size() - 4);
  write_bytes(dir / "cut.bin", bytes);
  EXPECT_NE(error_of([&] { nn::read_gpt2_weights(dir / "cut.bin"); }).find("truncated"),
            std::string::npos);
  // A model of another shape names the flag to change; the vocabulary names the data.
  auto wide = std::dynamic_pointer_cast<nn::Gpt>(nn::make_model(
      {.name = "gpt2", .width = 128, .layers = L, .heads = H, .context = T, .vocab = V}));
  EXPECT_NE(error_of([&] {
              nn::load_gpt2_weights(*wide, nn::read_gpt2_weights(dir / "m.bin"), "m.bin");
            }).find("width 64 but the model has 128; pass --width 64"),
            std::string::npos);
  auto other_vocab = tiny(2, 90);
  EXPECT_NE(error_of([&] {
              nn::load_gpt2_weights(*other_vocab, nn::read_gpt2_weights(dir / "m.bin"), "m.bin");
            }).find("vocab 100 but the model has 90"),
            std::string::npos);
}

TEST(Gpt2Weights, LongerLearnedPositionsLoadIntoAShorterContext) {
  TempDir dir;
  auto m = tiny(6);
  nn::write_gpt2_weights(nn::gpt2_weights_of(*m), dir / "m.bin", nn::Gpt2Layout::llmc);
  auto shorter = std::dynamic_pointer_cast<nn::Gpt>(nn::make_model(
      {.name = "gpt2", .width = C, .layers = L, .heads = H, .context = 8, .vocab = V}));
  nn::load_gpt2_weights(*shorter, nn::read_gpt2_weights(dir / "m.bin"), "m.bin");
  const auto all = floats(m->parameter("pos_emb.weight"));
  EXPECT_EQ(floats(shorter->parameter("pos_emb.weight")),
            std::vector<float>(all.begin(), all.begin() + 8 * C));
}

}  // namespace
}  // namespace mixp::test
