// The low-bit QAT recipes through the Trainer and the CLI (synthetic data, small models): the
// packed model's accuracy reported as test_accuracy and equal to fake_quant_accuracy, the
// checkpoint's packed model run by `mixp eval`, bit-identical resume, and the errors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/trainer.h"
#include "quant/qat_train_util.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using testing::run_cli;
using testing::TempDir;

TrainConfig small(const std::string& model, const std::string& precision) {
  return qat_testing::small(model, precision, 512, 256);
}
using qat_testing::extra;

TEST(LowBitTrain, PackedAccuracyEqualsFakeQuantAndEvalRunsTheSavedModel) {
  for (const char* p : {"int4-qat", "int2-qat", "ternary", "binary", "binary-act"}) {
    TempDir tmp;
    TrainConfig c = small("cnn", p);
    c.epochs = 2;  // batch norm and observers frozen in the second epoch
    c.save_dir = (tmp / "ck").string();
    Trainer t(c);
    const TrainResult r = t.fit();
    ASSERT_TRUE(r.test_accuracy.has_value());
    std::cout << "    " << p << " packed " << *r.test_accuracy << "\n";
    EXPECT_GE(*r.test_accuracy, 0.0) << p;  // 16 steps of a tiny model: exactness, not accuracy
    EXPECT_EQ(*r.test_accuracy, extra(r, "fake_quant_accuracy")) << p;
    ASSERT_TRUE(std::filesystem::exists(tmp / "ck" / kPackedModelFile)) << p;
    const EvalResult e = evaluate_checkpoint(tmp / "ck", EvalOptions{});
    EXPECT_EQ(e.evaluated, "packed");
    EXPECT_EQ(e.accuracy, r.test_accuracy) << p;
    EXPECT_GT(e.weight_bytes, 0);
  }
}

TEST(LowBitTrain, ResumeIsBitIdentical) {
  TempDir tmp;
  TrainConfig c = small("mlp", "binary-act");
  c.steps = 8;
  c.evaluate = false;
  Trainer full(c);
  const std::vector<double> all = full.train_steps(8);
  TrainConfig a = c;
  a.steps = 4;
  a.save_dir = (tmp / "half").string();
  Trainer(a).fit();
  TrainConfig b = c;
  b.resume_dir = (tmp / "half").string();
  Trainer second(b);
  const std::vector<double> rest = second.train_steps(4);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], all[4 + i]) << i;
}

TEST(LowBitTrain, RegistryAndErrors) {
  for (const char* p : {"int4-qat", "int2-qat", "ternary", "binary", "binary-act"}) {
    EXPECT_EQ(recipe_traits(p).family, RecipeFamily::lowbit_qat);
    EXPECT_FALSE(recipe_traits(p).supports_model("gpt"));
  }
  TrainConfig c = small("mlp", "int4-qat");
  c.layer_precision = "fc1=int3";
  EXPECT_THROW(Trainer{c}, ConfigError);
  c.layer_precision = "conv7=int4";
  EXPECT_THROW(Trainer{c}, ConfigError);
  c.layer_precision = "";
  c.loss_scale_init = 8;
  EXPECT_THROW(Trainer{c}, ConfigError);
}

TEST(LowBitCli, TrainEvalAndErrors) {
  TempDir tmp;
  const std::string ck = (tmp / "bin").string();
  const auto r = run_cli(
      "train --model mlp --width 32 --data synthetic --train-limit 256 --test-limit 128 --steps 4 "
      "--precision binary-act --layer-precision first=int4 --save '" + ck + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "binary-act");
  EXPECT_EQ(j["test_accuracy"], j["fake_quant_accuracy"]);
  const auto e = run_cli("eval --checkpoint '" + ck + "' --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto je = nlohmann::json::parse(e.out);
  EXPECT_EQ(je["evaluated"], "packed");
  EXPECT_EQ(je["test_accuracy"], j["test_accuracy"]);
  const auto q = run_cli("quantize --checkpoint '" + ck + "' --calibrate 2");
  EXPECT_NE(q.exit_code, 0);
  EXPECT_NE(q.err.find("packed low-bit model"), std::string::npos) << q.err;
  const auto bad = run_cli(
      "train --model mlp --data synthetic --steps 1 --precision ternary --layer-precision "
      "fc1=int5");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("int5"), std::string::npos) << bad.err;
  const auto fp32 = run_cli(
      "train --model mlp --width 32 --data synthetic --train-limit 256 --test-limit 128 --steps 1 "
      "--save '" + (tmp / "fp32").string() + "'");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  const auto nopack =
      run_cli("eval --checkpoint '" + (tmp / "fp32").string() + "' --precision packed");
  EXPECT_EQ(nopack.exit_code, 2) << nopack.err;
  EXPECT_NE(nopack.err.find("has no packed model"), std::string::npos) << nopack.err;
  const auto gpt = run_cli("train --model gpt --steps 1 --precision int4-qat");
  EXPECT_EQ(gpt.exit_code, 2) << gpt.err;
}

// Without VNNI oneDNN's int8 GEMM sums pairs in saturating int16; the packed model must stay
// exact there too (backend/lowbit_gemm.h falls back to an int32 loop).
TEST(LowBitCli, ExactWithoutVnni) {
  for (const char* p : {"int4-qat", "binary"}) {
    const auto r = run_cli(
        std::string("train --model mlp --width 32 --data synthetic --train-limit 256 "
                    "--test-limit 256 --steps 6 --lr 0.01 --precision ") + p + " --json",
        {{"ONEDNN_MAX_CPU_ISA", "AVX2"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["test_accuracy"], j["fake_quant_accuracy"]) << p;
    EXPECT_EQ(j["test_loss"], j["fake_quant_loss"]) << p;
  }
}

TEST(LowBitCli, CompareReportsTheBottomOfTheLadder) {
  TempDir tmp;
  const std::string out = (tmp / "cmp").string();
  const auto r = run_cli(
      "compare --data synthetic --train-limit 256 --test-limit 128 --batch 64 --threads 1 "
      "--model mlp --precisions fp32,int4-qat,binary-act --steps 3 --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("* accuracy of the packed low-bit model converted after training"),
            std::string::npos)
      << r.out;
  for (const char* f : {"report.md", "report.html"}) {
    std::ifstream in(tmp / "cmp" / f);
    const std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(t.find("Below 8 bits (the bottom of the ladder"), std::string::npos) << f;
    EXPECT_NE(t.find("binary-act "), std::string::npos) << f;
  }
}

}  // namespace
}  // namespace mixp::train
