// `mixp train --model gpt2` and `mixp convert --layout` as a user runs them: every recipe, a token
// file with checkpointing and gradient accumulation, --init-from each layout, and bad input
// (one-line error, non-zero exit, no output file).
#include <gtest/gtest.h>

#include <cmath>

#include "common/cli_runner.h"
#include "mixp/data/token_file.h"

namespace mixp::test {
namespace {

const std::string kTiny =
    "train --model gpt2 --layers 2 --width 64 --heads 2 --context 32 --batch 4 --threads 1 ";

std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s.append(p.string());
  s.push_back('\'');
  return s;
}

void write_tokens(const std::filesystem::path& p, size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t((i * 31 + (i / 7) * 5) % 1000);
  data::write_token_file(p, t);
}

TEST(Gpt2Cli, EveryRecipeTrainsIt) {
  for (const char* recipe : {"fp64", "fp32", "tf32", "bf16", "bf16-pure", "fp16", "fp16-o2",
                             "fp16-pure", "fp8", "fp8-current", "mxfp8"}) {
    const auto r = run_cli(kTiny + "--data synthetic --steps 2 --json --precision " + recipe);
    ASSERT_EQ(r.exit_code, 0) << recipe << ": " << r.err;
    const auto j = r.json();
    EXPECT_EQ(j["model"], "gpt2");
    EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>())) << recipe;
  }
  const auto r = run_cli(kTiny + "--data synthetic --steps 2 --precision int8-qat");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("precision 'int8-qat' quantizes models built of Linear"), std::string::npos)
      << r.err;
}

TEST(Gpt2Cli, TokenFileWithCheckpointingAndGradAccum) {
  TempDir dir;
  write_tokens(dir / "d_train.bin", 6000);
  write_tokens(dir / "d_val.bin", 600);
  const std::string run = kTiny + "--data " + q(dir / "d_train.bin") +
                          " --steps 3 --grad-accum 2 --precision bf16 --json ";
  const auto plain = run_cli(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto ckpt = run_cli(run + "--checkpointing");
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.err;
  // Recomputation gives the same activations bit for bit (nn/gpt.h), so the same losses.
  EXPECT_EQ(plain.json()["final_loss"], ckpt.json()["final_loss"]);
  EXPECT_NEAR(plain.json()["final_loss"].get<double>(), std::log(50257.0), 0.5);
  const auto bad = run_cli(kTiny + "--data " + q(dir / "nothere.bin") + " --steps 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("nothere.bin"), std::string::npos) << bad.err;
}

TEST(Gpt2Cli, InitFromEveryLayoutStartsFromThoseWeights) {
  TempDir dir;
  const auto a =
      run_cli(kTiny + "--data synthetic --steps 20 --lr 3e-3 --json --save " + q(dir / "a"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const double val_a = a.json()["val_loss"].get<double>();
  const auto src = dir / "a" / "model.safetensors";
  const auto c1 = run_cli("convert " + q(src) + " -o " + q(dir / "m.bin") + " --layout llmc");
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  const auto c2 = run_cli("convert " + q(dir / "m.bin") + " -o " + q(dir / "hf.safetensors") +
                          " --layout hf --json");
  ASSERT_EQ(c2.exit_code, 0) << c2.err;
  EXPECT_EQ(c2.json()["from_layout"], "llmc");
  for (const auto& f : {src, dir / "m.bin", dir / "hf.safetensors"}) {
    // One step at a vanishing learning rate: the validation loss is the saved model's.
    std::string args = kTiny + "--data synthetic --steps 1 --lr 1e-30 --json --init-from ";
    args += q(f);
    // A Hugging Face file has no head count: the model's (--heads 2) is used.
    const auto b = run_cli(args);
    ASSERT_EQ(b.exit_code, 0) << f << ": " << b.err;
    EXPECT_NEAR(b.json()["val_loss"].get<double>(), val_a, 1e-5 * val_a) << f;
  }
  const auto random = run_cli(kTiny + "--data synthetic --steps 1 --lr 1e-30 --json");
  ASSERT_EQ(random.exit_code, 0);
  EXPECT_GT(random.json()["val_loss"].get<double>(), val_a + 0.1) << "the init was used";

  const auto wide = run_cli(
      "train --model gpt2 --layers 2 --width 128 --heads 2 --context 32 --data synthetic "
      "--steps 1 --init-from " +
      q(dir / "m.bin"));
  EXPECT_NE(wide.exit_code, 0);
  EXPECT_NE(wide.err.find("pass --width 64"), std::string::npos) << wide.err;
  const auto gpt =
      run_cli("train --model gpt --data synthetic --steps 1 --init-from " + q(dir / "m.bin"));
  EXPECT_NE(gpt.exit_code, 0);
  EXPECT_NE(gpt.err.find("--init-from loads GPT-2 weights into --model gpt2"), std::string::npos)
      << gpt.err;
}

TEST(Gpt2Cli, ConvertRefusesWhatIsNotGpt2AndWritesNothing) {
  TempDir dir;
  write_text(dir / "junk.safetensors", "not a safetensors file at all");
  const auto r = run_cli("convert " + q(dir / "junk.safetensors") + " -o " + q(dir / "o.bin") +
                         " --layout llmc");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "o.bin"));
  const auto bad_layout = run_cli("convert " + q(dir / "junk.safetensors") + " -o " +
                                  q(dir / "o.bin") + " --layout onnx");
  EXPECT_NE(bad_layout.exit_code, 0);
  EXPECT_NE(bad_layout.err.find("known layouts: mixp, hf, llmc"), std::string::npos);
  const auto fp8 = run_cli("convert " + q(dir / "junk.safetensors") + " -o " + q(dir / "o.bin") +
                           " --layout llmc --to fp8_e4m3");
  EXPECT_NE(fp8.exit_code, 0);
  EXPECT_NE(fp8.err.find("fp32, bf16 or fp16"), std::string::npos) << fp8.err;
  const auto help = run_cli("convert --help");
  EXPECT_NE(help.out.find("--layout"), std::string::npos);
}

}  // namespace
}  // namespace mixp::test
