// The low-bit quantizers (quant/lowbit.h), the packing (quant/lowbit_model.h), the integer and
// XNOR GEMM cores (every tier against a plain loop), and the packed model against the
// fake-quantized one, bit for bit, for every scheme on the mlp and the cnn.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/xnor_kernels.h"
#include "common/temp_dir.h"
#include "mixp/format/cpu_features.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/quant/lowbit.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/tensor/factories.h"
#include "quant_test_util.h"

namespace mixp::quant {
namespace {

// ---- weight codes, by hand

TEST(LowBitCodes, Int4AndInt2PerChannelSymmetric) {
  // Row 0: amax 1.5 -> int4 scale 0.2, int2 scale 1.0; row 1: amax 0.75 -> 0.1 and 0.5. The
  // largest |w| lands on 7.5 (8 by ties-to-even or 7 by rounding of 1/scale): 7 either way.
  const Tensor w = from_vector(
      std::vector<float>{1.5f, -0.35f, 0.05f, 0.0f, -0.5f, 0.75f, 0.2f, 0.0f}, Shape{2, 4});
  std::vector<float> s;
  const std::vector<float> c4 = lowbit_weight_codes(w, LowBitScheme::int4, &s).to_vector<float>();
  EXPECT_FLOAT_EQ(s[0], 1.5f / 7.5f);
  EXPECT_FLOAT_EQ(s[1], 0.75f / 7.5f);
  // 1.5 / 0.2 = 7.5 -> 8 (ties to even) -> clamped to 7; -0.3 / 0.2 = -1.5 -> -2; 0.1/0.2 -> 0.
  EXPECT_EQ(c4, (std::vector<float>{7, -2, 0, 0, -5, 7, 2, 0}));
  const std::vector<float> c2 = lowbit_weight_codes(w, LowBitScheme::int2, &s).to_vector<float>();
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_FLOAT_EQ(s[1], 0.5f);
  EXPECT_EQ(c2, (std::vector<float>{1, 0, 0, 0, -1, 1, 0, 0}));
}

TEST(LowBitCodes, TernaryThresholdAndScalePerLayer) {
  // mean|w| = (1 + 0.2 + 0.6 + 0.2) / 4 = 0.5; delta = 0.35; above: 1.0 and 0.6 -> alpha 0.8.
  const Tensor w = from_vector(std::vector<float>{1.0f, -0.2f, -0.6f, 0.2f}, Shape{2, 2});
  std::vector<float> s;
  const std::vector<float> c = lowbit_weight_codes(w, LowBitScheme::ternary, &s).to_vector<float>();
  EXPECT_EQ(c, (std::vector<float>{1, 0, -1, 0}));
  EXPECT_FLOAT_EQ(s[0], 0.8f);
  EXPECT_FLOAT_EQ(s[1], 0.8f);
}

TEST(LowBitCodes, BinarySignAndMeanAbsPerChannel) {
  const Tensor w = from_vector(std::vector<float>{0.5f, -0.25f, 0.0f, -1.0f}, Shape{2, 2});
  std::vector<float> s;
  const std::vector<float> c = lowbit_weight_codes(w, LowBitScheme::binary, &s).to_vector<float>();
  EXPECT_EQ(c, (std::vector<float>{1, -1, 1, -1}));
  EXPECT_FLOAT_EQ(s[0], 0.375f);
  EXPECT_FLOAT_EQ(s[1], 0.5f);
}

TEST(LowBitCodes, WeightGradientIsStraightThroughOverTheScale) {
  Tensor w =
      from_vector(std::vector<float>{1.5f, -0.3f, 0.1f, 2.0f}, Shape{2, 2}).requires_grad_(true);
  for (LowBitScheme sc : {LowBitScheme::int4, LowBitScheme::int2, LowBitScheme::binary}) {
    std::vector<float> s;
    const Tensor c = lowbit_weight_codes(w, sc, &s);
    const Tensor g = from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
    w.set_grad(Tensor());
    sum(mul(c, g)).backward();
    const std::vector<float> gw = w.grad().to_vector<float>();
    std::vector<float> codes(4), sc2(2);
    std::vector<uint8_t> mask(4);
    const std::vector<float> wv = w.to_vector<float>();
    lowbit_weight_codes_raw(wv.data(), 2, 2, sc, codes.data(), sc2.data(), mask.data());
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(gw[i], mask[i] ? (i + 1) * (1.0f / s[i / 2]) : 0.0f) << name(sc) << " " << i;
    }
  }
  // binary: |2.0| > 1 is clipped (BinaryConnect).
  std::vector<float> codes(4), sc(2);
  std::vector<uint8_t> mask(4);
  const std::vector<float> wv = w.to_vector<float>();
  lowbit_weight_codes_raw(wv.data(), 2, 2, LowBitScheme::binary, codes.data(), sc.data(),
                          mask.data());
  EXPECT_EQ(mask[3], 0);
}

// ---- activation codes

TEST(LowBitCodes, ActivationCodesAndClippedSignGradient) {
  Tensor x =
      from_vector(std::vector<float>{-0.5f, 0.0f, 0.26f, 3.0f, 2.0f}, Shape{5}).requires_grad_(true);
  ActCodeParams p;
  p.kind = ActCodeKind::unsigned_bits;
  p.bits = 2;
  p.scale = lowbit_act_scale(p.kind, 2, -0.5f, 1.5f);  // 1.5 / 3
  EXPECT_FLOAT_EQ(p.scale, 0.5f);
  EXPECT_EQ(lowbit_act_codes(x, p).to_vector<float>(), (std::vector<float>{-0.0f, 0, 1, 3, 3}));
  Tensor y = lowbit_act_codes(x, p);
  sum(y).backward();
  // In range: 0, 0.26, (4 is out: 3.0 / 0.5 = 6 > 3), 2.0 / 0.5 = 4 > 3 out; -0.5 -> -1 < 0 out.
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 2, 2, 0, 0}));
  x.set_grad(Tensor());
  p.kind = ActCodeKind::sign;
  p.scale = 1.0f;
  Tensor z = lowbit_act_codes(x, p);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{-1, 1, 1, 1, 1}));
  sum(z).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1, 1, 0, 0}));
  p.kind = ActCodeKind::signed8;
  p.scale = lowbit_act_scale(p.kind, 8, -2.55f, 1.0f);
  EXPECT_FLOAT_EQ(p.scale, 2.55f / 127.5f);
  EXPECT_EQ(lowbit_act_codes(x, p).to_vector<float>()[0], std::nearbyint(-0.5f * (1.0f / p.scale)));
}

// ---- packing

TEST(LowBitPack, RoundTripsEverySchemeWithOddRows) {
  std::mt19937 rng(7);
  for (LowBitScheme s : {LowBitScheme::int8, LowBitScheme::int4, LowBitScheme::int2,
                         LowBitScheme::ternary, LowBitScheme::binary, LowBitScheme::binary_act}) {
    const int64_t O = 3, K = 13;
    std::uniform_int_distribution<int> d(weight_qmin(s), weight_qmax(s));
    std::vector<float> codes(O * K);
    for (float& c : codes) {
      int v = d(rng);
      if ((s == LowBitScheme::binary || s == LowBitScheme::binary_act) && v == 0) v = 1;
      c = static_cast<float>(v);
    }
    const std::vector<uint8_t> p = pack_weight_codes(codes.data(), O, K, s);
    EXPECT_EQ(static_cast<int64_t>(p.size()),
              (s == LowBitScheme::ternary ? 2 : 1) * O * packed_row_bytes(K, s));
    const std::vector<int8_t> u = unpack_weight_codes(p.data(), O, K, s);
    for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(u[i], codes[i]) << name(s) << " " << i;
  }
  EXPECT_EQ(packed_row_bytes(13, LowBitScheme::int4), 7);
  EXPECT_EQ(packed_row_bytes(13, LowBitScheme::int2), 4);
  EXPECT_EQ(packed_row_bytes(13, LowBitScheme::binary), 2);
  const float bad[2] = {8.0f, 0.0f};
  EXPECT_THROW(pack_weight_codes(bad, 1, 2, LowBitScheme::int4), std::invalid_argument);
  const float zero[2] = {1.0f, 0.0f};
  EXPECT_THROW(pack_weight_codes(zero, 1, 2, LowBitScheme::binary), std::invalid_argument);
}

// ---- GEMM cores

TEST(LowBitGemm, XnorKernelsMatchTheSignedDotProduct) {
  std::mt19937_64 rng(11);
  // 300 bits in 8 words (the padding zero); shapes with and without whole 6-row x 16-column
  // register blocks of the AVX-512 kernel, and their remainders.
  for (const auto& [M, O] : {std::pair<int64_t, int64_t>{7, 6}, {13, 37}, {6, 16}, {1, 33}}) {
    SCOPED_TRACE(::testing::Message() << M << " x " << O);
    const int64_t K = 300, words = 8;
    std::vector<uint64_t> a(M * words, 0), b(O * words, 0);
    for (auto* v : {&a, &b}) {
      for (size_t r = 0; r < v->size() / words; ++r) {
        for (int64_t w = 0; w < (K + 63) / 64; ++w) {
          uint64_t x = rng();
          if (w == K / 64) x &= (uint64_t{1} << (K % 64)) - 1;
          (*v)[r * words + w] = x;
        }
      }
  }
  auto bit = [&](const std::vector<uint64_t>& v, int64_t r, int64_t k) {
    return ((v[r * words + k / 64] >> (k % 64)) & 1) ? -1 : 1;
  };
  std::vector<int32_t> want(M * O);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < O; ++o) {
      int s = 0;
      for (int64_t k = 0; k < K; ++k) s += bit(a, m, k) * bit(b, o, k);
      want[m * O + o] = s;
    }
  std::vector<int32_t> got(M * O);
  cpu::xnor::xnor_gemm_generic(got.data(), a.data(), b.data(), M, O, words, K);
  EXPECT_EQ(got, want);
  if (cpu_features().avx512_vpopcntdq && cpu_features().use_avx512()) {
    std::fill(got.begin(), got.end(), 0);
    cpu::xnor::xnor_gemm_avx512(got.data(), a.data(), b.data(), M, O, words, K);
    EXPECT_EQ(got, want);
  } else {
    std::cout << "    (no AVX-512 VPOPCNTDQ here: the AVX-512 kernel is not run)\n";
  }
  std::fill(got.begin(), got.end(), 0);
  xnor_gemm_s32(got.data(), a.data(), b.data(), M, O, words, K);
  EXPECT_EQ(got, want);
  }
}

TEST(LowBitGemm, Int8GemmMatchesALoopForUnsignedAndSignedInputs) {
  std::mt19937 rng(5);
  const int64_t M = 5, O = 4, K = 37;
  std::vector<uint8_t> a(M * K);
  std::vector<int8_t> b(O * K);
  for (auto& v : a) v = static_cast<uint8_t>(rng() % 256);
  for (auto& v : b) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  for (bool sgn : {false, true}) {
    std::vector<int32_t> got(M * O), want(M * O);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < O; ++o) {
        int32_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int32_t x = sgn ? static_cast<int8_t>(a[m * K + k]) : a[m * K + k];
          s += x * b[o * K + k];
        }
        want[m * O + o] = s;
      }
    int8_gemm_s32(got.data(), a.data(), sgn, b.data(), M, O, K);
    EXPECT_EQ(got, want) << (sgn ? "s8" : "u8");
  }
}

// ---- the packed model equals the fake-quantized model

std::shared_ptr<nn::Module> small_model(const std::string& name) {
  nn::ModelConfig c;
  c.name = name;
  c.seed = 2;
  if (name == "cnn") {
    c.width = 8;
    c.mlp_width = 32;
  } else {
    c.width = 48;
    c.layers = 2;
  }
  return nn::make_model(c);
}

class PackedEqualsFakeQuant
    : public ::testing::TestWithParam<std::tuple<std::string, LowBitScheme>> {};

TEST_P(PackedEqualsFakeQuant, BitForBitAfterTrainingSteps) {
  const auto& [model_name, scheme] = GetParam();
  auto model = small_model(model_name);
  prepare_lowbit_qat(*model, LowBitConfig{scheme, {}});
  Generator g(3);
  const Tensor x = testing::train_lowbit_then_freeze(*model, g, 16, 3);
  const Tensor want = model->forward(x);
  auto packed = convert_to_packed(*model);
  const Tensor got = packed->forward(x);
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  // A batch that runs in slices where conv outputs are fp32 (PackedModel::kSlice), the last
  // one short.
  const Tensor x2 = randn(Shape{2 * PackedModel::kSlice + 5, 1, 28, 28}, g);
  EXPECT_EQ(packed->forward(x2).to_vector<float>(), model->forward(x2).to_vector<float>());
  test::TempDir tmp;
  save_packed_model(*packed, tmp / "p.safetensors");
  EXPECT_EQ(load_packed_model(tmp / "p.safetensors")->forward(x).to_vector<float>(),
            want.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, PackedEqualsFakeQuant,
    ::testing::Combine(::testing::Values("mlp", "cnn"),
                       ::testing::Values(LowBitScheme::int4, LowBitScheme::int2,
                                         LowBitScheme::ternary, LowBitScheme::binary,
                                         LowBitScheme::binary_act)),
    [](const auto& info) {
      std::string n = std::get<0>(info.param) + "_" + std::string(name(std::get<1>(info.param)));
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(PackedEqualsFakeQuantWide, BinaryActConvWithMoreThan64Channels) {
  // conv2 sees 80 channels: its sign bits take two words per input position.
  nn::ModelConfig c;
  c.name = "cnn";
  c.seed = 4;
  c.width = 80;
  c.mlp_width = 16;
  auto model = nn::make_model(c);
  prepare_lowbit_qat(*model, LowBitConfig{LowBitScheme::binary_act, {}});
  Generator g(5);
  const Tensor x = randn(Shape{2, 1, 28, 28}, g);
  model->forward(x);  // observe
  set_lowbit_observers_enabled(*model, false);
  model->eval();
  EXPECT_EQ(convert_to_packed(*model)->forward(x).to_vector<float>(),
            model->forward(x).to_vector<float>());
}

TEST(LowBitPrepare, KeepsFirstAndLastLayersInt8AndAppliesOverrides) {
  auto model = small_model("cnn");
  prepare_lowbit_qat(*model, LowBitConfig{LowBitScheme::binary_act, {{"fc1", LowBitScheme::int4}}});
  std::map<std::string, LowBitScheme> got;
  for (const auto& [n, m] : model->named_modules()) {
    if (const auto* l = dynamic_cast<const LowBitLayer*>(m)) got[n] = l->scheme();
  }
  EXPECT_EQ(got.at("conv1"), LowBitScheme::int8);
  EXPECT_EQ(got.at("conv2"), LowBitScheme::binary_act);
  EXPECT_EQ(got.at("fc1"), LowBitScheme::int4);
  EXPECT_EQ(got.at("head"), LowBitScheme::int8);
  auto other = small_model("mlp");
  EXPECT_THROW(prepare_lowbit_qat(*other, LowBitConfig{LowBitScheme::int4, {{"conv9", LowBitScheme::int8}}}),
               std::invalid_argument);
  EXPECT_THROW(prepare_lowbit_qat(*model, LowBitConfig{}), std::invalid_argument);  // twice
  EXPECT_THROW(parse_lowbit_scheme("int3"), std::invalid_argument);
}

TEST(LowBitModel, FileIsOneThirtySecondOfFp32ForBinaryWeights) {
  auto model = small_model("mlp");
  prepare_lowbit_qat(*model, LowBitConfig{LowBitScheme::binary, {{"first", LowBitScheme::binary},
                                                                 {"last", LowBitScheme::binary}}});
  Generator g(1);
  model->forward(randn(Shape{4, 784}, g));
  const auto packed = convert_to_packed(*model);
  int64_t fp32 = 0, weights = 0;
  for (const auto& [n, t] : model->named_parameters()) {
    fp32 += static_cast<int64_t>(t.nbytes());
    if (t.dim() == 2) weights += t.numel();
  }
  int64_t packed_bytes = 0;
  for (const PackedStep& s : packed->steps()) packed_bytes += static_cast<int64_t>(s.packed.size());
  EXPECT_EQ(packed_bytes * 8, weights + 0);  // 784, 48 and 48 columns are whole bytes
  EXPECT_LT(packed->weight_bytes(), fp32 / 16);
}

TEST(LowBitModel, DamagedFilesAreRefusedWithTheReason) {
  auto model = small_model("mlp");
  prepare_lowbit_qat(*model, LowBitConfig{LowBitScheme::int2, {}});
  Generator g(1);
  model->forward(randn(Shape{4, 784}, g));
  test::TempDir tmp;
  save_packed_model(*convert_to_packed(*model), tmp / "p.safetensors");
  SafeTensorsFile f = read_safetensors(tmp / "p.safetensors");
  auto expect_refused = [&](SafeTensorsFile bad, const std::string& needle) {
    try {
      load_packed_model(bad, tmp / "bad.safetensors");
      ADD_FAILURE() << "accepted; wanted " << needle;
    } catch (const SafeTensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SafeTensorsFile no_meta = f;
  no_meta.metadata.erase("mixp.packed_model");
  expect_refused(no_meta, "no 'mixp.packed_model' metadata");
  SafeTensorsFile short_w = f;
  short_w.find("fc2.weight")->data.pop_back();
  short_w.find("fc2.weight")->shape = {short_w.find("fc2.weight")->numel() - 1};
  expect_refused(short_w, "fc2.weight");
  SafeTensorsFile bad_scheme = f;
  std::string& m = bad_scheme.metadata["mixp.packed_model"];
  m.replace(m.find("\"int2\""), 6, "\"int3\"");
  expect_refused(bad_scheme, "int3");
  EXPECT_THROW(convert_to_packed(*small_model("mlp")), std::invalid_argument);  // not prepared
}

}  // namespace
}  // namespace mixp::quant
