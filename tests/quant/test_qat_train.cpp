// The int8-qat recipe through the Trainer and the CLI (synthetic data, small models): the
// converted model's accuracy reported as test_accuracy with fake_quant_accuracy beside it, the
// checkpoint's int8 model run by `mixp eval`, bit-identical resume (observer state included),
// `mixp quantize`, weight-only eval, and the errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mixp/io/convert_safetensors.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/quantize_checkpoint.h"
#include "mixp/train/trainer.h"
#include "quant/qat_train_util.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using testing::run_cli;
using testing::TempDir;

TrainConfig small(const std::string& model, const std::string& precision) {
  return qat_testing::small(model, precision, 1024, 512);
}
using qat_testing::extra;

TEST(QatTrain, ReportsConvertedAndFakeQuantAccuracyAndSavesTheInt8Model) {
  TempDir tmp;
  TrainConfig c = small("cnn", "int8-qat");
  c.epochs = 2;  // batch norm and observers frozen in the second epoch (defaults)
  c.save_dir = (tmp / "qat").string();
  Trainer t(c);
  const TrainResult r = t.fit();
  ASSERT_TRUE(r.test_accuracy.has_value());
  const double fq = extra(r, "fake_quant_accuracy");
  std::cout << "    int8 " << *r.test_accuracy << "  fake quant " << fq << "\n";
  EXPECT_GT(*r.test_accuracy, 0.5);  // synthetic data is easy
  EXPECT_NEAR(*r.test_accuracy, fq, 0.02);
  ASSERT_TRUE(std::filesystem::exists(tmp / "qat" / kInt8ModelFile));
  // mixp eval runs the saved int8 model: the same accuracy.
  const EvalResult e = evaluate_checkpoint(tmp / "qat", EvalOptions{});
  EXPECT_EQ(e.evaluated, "int8");
  EXPECT_EQ(e.accuracy, r.test_accuracy);
  // Converting the QAT checkpoint again gives the same model too.
  EvalOptions o;
  o.precision = "int8-qat";
  const EvalResult e2 = evaluate_checkpoint(tmp / "qat", o);
  EXPECT_EQ(e2.accuracy, r.test_accuracy);
  const auto json = nlohmann::json::parse(result_to_json(r));
  EXPECT_TRUE(json.contains("fake_quant_accuracy"));
  EXPECT_EQ(json["precision"], "int8-qat");
}

TEST(QatTrain, ResumeIsBitIdenticalWithObserverState) {
  TempDir tmp;
  TrainConfig c = small("mlp", "int8-qat");
  c.steps = 12;
  c.evaluate = false;
  Trainer full(c);
  const std::vector<double> all = full.train_steps(12);
  TrainConfig a = c;
  a.steps = 6;
  a.save_dir = (tmp / "half").string();
  Trainer first(a);
  first.fit();
  TrainConfig b = c;
  b.resume_dir = (tmp / "half").string();
  Trainer second(b);
  const std::vector<double> rest = second.train_steps(6);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], all[6 + i]) << i;
  EXPECT_EQ(second.model().buffer("fc1.activation_post_process.min_val").to_vector<float>(),
            full.model().buffer("fc1.activation_post_process.min_val").to_vector<float>());
}

TEST(QatTrain, RejectsBadOptions) {
  TrainConfig c = small("mlp", "fp32");
  c.qat_freeze_bn_epoch = 1;
  EXPECT_THROW(Trainer{c}, ConfigError);
  c = small("mlp", "int8-qat");
  c.qat_disable_observer_epoch = 0;
  EXPECT_THROW(Trainer{c}, ConfigError);
  c = small("gpt", "int8-qat");
  c.model.width = 16;
  c.model.layers = 1;
  c.model.heads = 2;
  c.model.context = 8;
  c.model.mlp_width = 32;
  c.train_limit = 0;
  c.test_limit = 0;
  try {
    Trainer t(c);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("int8-qat"), std::string::npos) << e.what();
  }
}

TEST(QatTrain, QuantizeCalibratesAnFp32Checkpoint) {
  TempDir tmp;
  TrainConfig c = small("cnn", "fp32");
  c.steps = 16;
  c.save_dir = (tmp / "fp32").string();
  Trainer(c).fit();
  QuantizeOptions o;
  o.calibrate = 4;
  o.out = tmp / "int8";
  const QuantizeResult r = quantize_checkpoint(tmp / "fp32", o);
  std::cout << "    fp32 " << r.before.accuracy.value_or(NAN) << "  int8 "
            << r.after.accuracy.value_or(NAN) << "\n";
  EXPECT_NEAR(r.after.accuracy.value_or(0), r.before.accuracy.value_or(1), 0.03);
  EXPECT_LT(r.int8_weight_bytes * 3, r.source_weight_bytes);
  const EvalResult e = evaluate_checkpoint(tmp / "int8", EvalOptions{});
  EXPECT_EQ(e.evaluated, "int8");
  EXPECT_EQ(e.accuracy, r.after.accuracy);
  // No calibration: convert's error.
  o.calibrate = 0;
  o.out.clear();
  try {
    quantize_checkpoint(tmp / "fp32", o);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("convert needs calibrated observers"), std::string::npos);
  }
  // The CLI: --calibrate 0 is outside the flag's range (docs/cli.md "Numeric flags"): a usage
  // error (exit 2) naming the flag, one line, nothing written.
  const auto cli = run_cli("quantize --checkpoint '" + (tmp / "fp32").string() +
                               "' --calibrate 0 --out '" + (tmp / "none").string() + "'");
  EXPECT_EQ(cli.exit_code, 2) << cli.err;
  EXPECT_NE(cli.err.find("mixp quantize: error: --calibrate: must be an integer from 1"),
            std::string::npos)
      << cli.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "none"));
}

TEST(QatTrain, EvalWithNf4WeightsIsCloseToFp32) {
  TempDir tmp;
  TrainConfig c = small("mlp", "fp32");
  c.steps = 30;
  c.save_dir = (tmp / "mlp").string();
  const TrainResult r = Trainer(c).fit();
  for (const char* w : {"nf4", "int4"}) {
    EvalOptions o;
    o.weights = w;
    const EvalResult e = evaluate_checkpoint(tmp / "mlp", o);
    std::cout << "    fp32 " << *r.test_accuracy << "  " << w << " " << e.accuracy.value_or(NAN)
              << " (" << e.evaluated << ", " << e.weight_bytes << " bytes)\n";
    EXPECT_NEAR(e.accuracy.value_or(0), *r.test_accuracy, 0.03) << w;
  }
  const auto cli = run_cli(
      "eval --checkpoint '" + (tmp / "mlp").string() + "' --weights nf4 --compute fp32 --json");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const auto j = nlohmann::json::parse(cli.out);
  EXPECT_EQ(j["weights"], "nf4");
  EXPECT_EQ(j["compute"], "fp32");
  const auto bad =
      run_cli("eval --checkpoint '" + (tmp / "mlp").string() + "' --weights nf3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("nf4 or int4"), std::string::npos) << bad.err;
  // A checkpoint whose model.safetensors `mixp convert --to nf4` re-encoded: the Linear weights
  // keep their stored codes (the same codes --weights nf4 makes), the biases are decoded.
  std::filesystem::create_directories(tmp / "nf4file");
  std::filesystem::copy_file(tmp / "mlp" / kStateFile, tmp / "nf4file" / kStateFile);
  FileConvertOptions co;
  co.to = "nf4";
  write_safetensors(tmp / "nf4file" / kModelFile,
                    convert_safetensors(read_safetensors(tmp / "mlp" / kModelFile), co).file);
  const EvalResult fromfile = evaluate_checkpoint(tmp / "nf4file", EvalOptions{});
  EXPECT_EQ(fromfile.evaluated, "nf4 weights from mixp convert, bf16 compute");
  EXPECT_NEAR(fromfile.accuracy.value_or(0), *r.test_accuracy, 0.03);
  EvalOptions wrong;
  wrong.weights = "int4";
  EXPECT_THROW(evaluate_checkpoint(tmp / "nf4file", wrong), ConfigError);
  const auto no8 =
      run_cli("eval --checkpoint '" + (tmp / "mlp").string() + "' --precision int8");
  EXPECT_EQ(no8.exit_code, 2);
  EXPECT_NE(no8.err.find("mixp quantize"), std::string::npos) << no8.err;
}

}  // namespace
}  // namespace mixp::train
