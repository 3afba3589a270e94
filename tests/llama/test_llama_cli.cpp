// `mixp train --model llama` and `mixp plan --model-shape` for the LLaMA presets as a user runs
// them (issue 31 item 2): the recipes train it, checkpointing recomputes the same numbers,
// --init-from starts from a Hugging Face directory, and bad directories end in one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "common/cli_runner.h"
#include "mixp/nn/llama_hf.h"

namespace mixp::test {
namespace {

const std::string kTiny = "train --model llama --context 32 --batch 4 --threads 1 --data synthetic ";

std::string q(const std::filesystem::path& p) {
  std::string s = "'";  // appended, not "'" + ...: GCC 12's -Wrestrict misfires on the latter
  s.append(p.string());
  s.push_back('\'');
  return s;
}

TEST(LlamaCli, RecipesTrainIt) {
  for (const char* recipe : {"fp32", "bf16", "fp16", "fp8"}) {
    const auto r = run_cli(kTiny + "--steps 2 --json --no-eval --precision " + recipe);
    ASSERT_EQ(r.exit_code, 0) << recipe << ": " << r.err;
    EXPECT_EQ(r.json()["model"], "llama");
    EXPECT_TRUE(std::isfinite(r.json()["final_loss"].get<double>())) << recipe;
  }
  const auto plain = run_cli(kTiny + "--steps 3 --json --no-eval --kv-heads 1");
  const auto ckpt = run_cli(kTiny + "--steps 3 --json --no-eval --kv-heads 1 --checkpointing");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.err;
  EXPECT_EQ(plain.json()["final_loss"], ckpt.json()["final_loss"]);
  const auto bad = run_cli(kTiny + "--steps 1 --heads 4 --kv-heads 3");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("kv_heads 3 must divide heads 4"), std::string::npos) << bad.err;
}

TEST(LlamaCli, InitFromAHuggingFaceDirectory) {
  TempDir dir;
  nn::LlamaConfig c;
  c.vocab = 256;
  c.context = 64;
  c.width = 32;
  c.layers = 1;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_width = 40;
  c.rope_theta = 500000.0;
  Generator g(5);
  const nn::Llama model(c, g);
  nn::write_llama_hf(model, dir / "hf", {.dtype = DType::bf16, .max_shard_bytes = 8000, .model_type = ""});
  nn::write_llama_hf(model, dir / "sharded", {.dtype = DType::fp32, .max_shard_bytes = 8000, .model_type = ""});
  nn::write_llama_hf(model, dir / "single", {.dtype = DType::fp32, .max_shard_bytes = 1 << 30, .model_type = ""});
  // One step at a vanishing learning rate: the validation loss is the checkpoint's, the same from
  // the sharded and the single-file copy; a random init's differs.
  const std::string run = kTiny + "--steps 1 --lr 1e-30 --json --seed 1 --init-from ";
  const auto a = run_cli(run + q(dir / "sharded")), b = run_cli(run + q(dir / "single"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.json()["val_loss"].get<double>(), b.json()["val_loss"].get<double>());
  const auto r1 = run_cli(kTiny + "--steps 1 --lr 1e-30 --json --width 32 --layers 1 --seed 1");
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_GT(std::fabs(r1.json()["val_loss"].get<double>() - a.json()["val_loss"].get<double>()),
            1e-3);
  const auto h = run_cli(run + q(dir / "hf"));
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const auto wide = run_cli(kTiny + "--steps 1 --width 64 --init-from " + q(dir / "hf"));
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_NE(wide.err.find("--width 64 differs from"), std::string::npos) << wide.err;
  const auto none = run_cli(kTiny + "--steps 1 --init-from " + q(dir / "nothere"));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("mixp train: error: --init-from"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("config.json' does not exist"), std::string::npos) << none.err;
  EXPECT_EQ(std::count(none.err.begin(), none.err.end(), '\n'), 1) << none.err;
}

TEST(LlamaCli, PlanKnowsThePresets) {
  for (const auto& [shape, params] : {std::pair{"smollm-135m", int64_t(134515008)},
                                      std::pair{"tinyllama-1.1b", int64_t(1100048384)},
                                      std::pair{"llama2-7b", int64_t(6738415616)}}) {
    const auto r = run_cli(std::string("plan --model-shape ") + shape + " --batch 1 --json");
    ASSERT_EQ(r.exit_code, 0) << shape << ": " << r.err;
    EXPECT_EQ(r.json()["parameters"].get<int64_t>(), params) << shape;
  }
}

// The fine-tuning study (issue 31): `mixp compare --model llama --init-from DIR --data text.txt
// --precisions bf16,fp8,qlora-nf4 --lora ...` tokenizes the text with DIR's tokenizer.model once,
// runs every recipe with the adapters from the same weights, and reports each run's trainable
// parameters next to its memory; a text without a tokenizer and QLoRA without --lora are exit 2.
TEST(LlamaCli, CompareRunsTheFineTuningStudy) {
  TempDir dir;
  nn::LlamaConfig c;
  c.vocab = 128;
  c.context = 64;
  c.width = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_width = 48;
  Generator g(3);
  const nn::Llama model(c, g);
  nn::write_llama_hf(model, dir / "hf", {.dtype = DType::bf16, .max_shard_bytes = 1 << 30, .model_type = ""});
  {
    std::ofstream text(dir / "text.txt");
    for (int i = 0; i < 300; ++i)
      text << "line " << i << ": the quick brown fox jumps over the lazy dog " << i * 7 % 13 << "\n";
  }
  const auto tok = run_cli("tokenize " + q(dir / "text.txt") + " --train -o " +
                           q(dir / "hf" / "tokenizer.model") +
                           " --vocab-size 60 --model-type bpe --threads 1");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const std::string study = "compare --model llama --init-from " + q(dir / "hf") + " --data " +
                            q(dir / "text.txt") + " --steps 3 --batch 2 --context 16 --threads 1 ";
  const std::string lora = "--lora r=4,alpha=8,targets=q_proj,k_proj,v_proj,o_proj ";
  const auto r = run_cli(study + lora + "--precisions bf16,fp8,qlora-nf4 --json --out " +
                         q(dir / "study"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tokenized"), std::string::npos) << r.err;
  const auto runs = r.json()["runs"];
  ASSERT_EQ(runs.size(), 3u);
  // Per layer A [4, in] + B [out, 4] on q and o (32 -> 32) and on k and v (32 -> 16).
  const int64_t adapters = 2 * (2 * 4 * (32 + 32) + 2 * 4 * (32 + 16));
  for (const auto& run : runs) {
    EXPECT_FALSE(run["diverged"].get<bool>()) << run["precision"];
    EXPECT_TRUE(std::isfinite(run["val_loss"].get<double>())) << run["precision"];
    EXPECT_EQ(run["trainable_parameters"].get<int64_t>(), adapters) << run["precision"];
    EXPECT_GT(run["peak_memory_bytes"].get<int64_t>(), 0);
  }
  const std::string md = read_text(dir / "study" / "report.md");
  EXPECT_NE(md.find("| qlora-nf4 | 1,792 of"), std::string::npos) << md;
  const auto no_lora = run_cli(study + "--precisions bf16,qlora-nf4 --out " + q(dir / "s4"));
  EXPECT_EQ(no_lora.exit_code, 2) << no_lora.err;
  EXPECT_NE(no_lora.err.find("give --lora"), std::string::npos) << no_lora.err;
  const auto bad_tok = run_cli(study + "--precisions bf16 --tokenizer " +
                               q(dir / "nothere.model") + " --out " + q(dir / "s2"));
  EXPECT_EQ(bad_tok.exit_code, 1) << bad_tok.err;  // a missing tokenizer file: while working
  std::filesystem::remove(dir / "hf" / "tokenizer.model");
  const auto no_tok = run_cli(study + "--precisions bf16 --out " + q(dir / "s3"));
  EXPECT_EQ(no_tok.exit_code, 2) << no_tok.err;
  EXPECT_NE(no_tok.err.find("has no tokenizer.model: give --tokenizer"), std::string::npos)
      << no_tok.err;
}

}  // namespace
}  // namespace mixp::test
