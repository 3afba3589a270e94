// `mixp tokenize` as a user runs it: train a SentencePiece model, tokenize text with it (ids as
// spm_encode's), train the gpt on the token file (its vocabulary from the file), a vocabulary
// above 65535 (uint32 ids) end to end, and bad input (one-line error, exit code, no output file).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/cli_runner.h"
#include "mixp/data/token_file.h"

namespace mixp::test {
namespace {

const std::string kFortunes = "/usr/share/games/fortunes/fortunes";
const std::string kTinyGpt =
    "train --model gpt --layers 1 --width 32 --heads 2 --context 32 --batch 4 --threads 1 ";

// Built with append: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s.append(p.string());
  s.push_back('\'');
  return s;
}

TEST(TokenizeCli, TrainTokenizeAndTrainTheGpt) {
  TempDir dir;
  const auto model = dir / "tok" / "tokenizer.model";
  const auto t = run_cli("tokenize --train " + kFortunes +
                         " --vocab-size 512 --model-type bpe --threads 1 --json -o " + q(model));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.json()["vocab"], 512);
  EXPECT_EQ(t.json()["model_type"], "bpe");
  EXPECT_EQ(t.err, "");  // SentencePiece's trainer log stays quiet
  const auto r = run_cli("tokenize " + kFortunes + " --tokenizer " + q(dir / "tok") + " -o " +
                         q(dir / "f.bin") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = r.json();
  EXPECT_EQ(j["vocab"], 512);
  EXPECT_EQ(j["token_dtype"], "uint16");
  EXPECT_EQ(j["bos"], "line");
  const auto c = data::TokenCorpus::load(dir / "f.bin");
  EXPECT_EQ(c.size(), j["tokens"].get<int64_t>());
  EXPECT_EQ(c.vocab_size(), 512);
  EXPECT_EQ(c.train_tokens()[0], 1u);  // BOS first
  // Plain text output names the file and the count.
  const auto plain = run_cli("tokenize " + kFortunes + " --tokenizer " + q(model) + " --bos none -o " +
                             q(dir / "g.bin"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("uint16 ids, BOS per none"), std::string::npos) << plain.out;
  // The gpt takes the token file's vocabulary: a first loss near ln(512), not ln(50257).
  const auto g = run_cli(kTinyGpt + "--data " + q(dir / "f.bin") + " --steps 3 --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.json()["data"].get<std::string>().find("vocabulary 512"), std::string::npos)
      << g.out;
  EXPECT_NEAR(g.json()["final_loss"].get<double>(), std::log(512.0), 0.7);
}

TEST(TokenizeCli, VocabularyAboveUint16Trains) {
  TempDir dir;
  std::vector<uint32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint32_t((i * 7919 + i / 3) % 70000);
  data::write_token_file(dir / "w.bin", ids, 70000);
  const auto g = run_cli(kTinyGpt + "--data " + q(dir / "w.bin") + " --steps 2 --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.json()["data"].get<std::string>().find("vocabulary 70000"), std::string::npos)
      << g.out;
  EXPECT_NEAR(g.json()["final_loss"].get<double>(), std::log(70000.0), 0.7);
}

TEST(TokenizeCli, BadInputIsOneLineAndNoFile) {
  TempDir dir;
  std::filesystem::create_directories(dir / "hf");
  write_text(dir / "hf" / "tokenizer.json", "{}");
  write_text(dir / "bad.model", std::string(300, '\x07'));
  const auto out = q(dir / "o.bin");
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"tokenize " + kFortunes + " --tokenizer " + q(dir / "hf") + " -o " + out, 1,
       "mixp reads SentencePiece models (tokenizer.model"},
      {"tokenize " + kFortunes + " --tokenizer " + q(dir / "bad.model") + " -o " + out, 1,
       "is not a valid SentencePiece model"},
      {"tokenize " + kFortunes + " -o " + out, 2, "--tokenizer DIR|FILE is required"},
      {"tokenize " + kFortunes + " --tokenizer " + q(dir / "hf") + " --bos twice -o " + out, 2,
       "unknown BOS mode 'twice'"},
      {"tokenize " + kFortunes + " --tokenizer " + q(dir / "hf") + " --vocab-size 100 -o " + out,
       2, "--vocab-size applies to --train"},
      {"tokenize --train " + kFortunes + " --vocab-size 512 --model-type word -o " + out, 2,
       "unknown SentencePiece model type 'word'"},
      {"tokenize --train " + kFortunes + " -o " + out, 2, "--train needs --vocab-size"},
      {"tokenize --train " + kFortunes + " --vocab-size 90000 --threads 1 -o " + out, 1,
       "Vocabulary size too high (90000)"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(r.err.rfind("mixp tokenize: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"bad.model", "hf"}));
}

}  // namespace
}  // namespace mixp::test
