// SentencePiece tokenizers (data/tokenizer.h) against the sentencepiece package's own CLI
// (spm_train, spm_encode) as the independent peer: a model trained here equals spm_train's with
// the same options, the ids equal spm_encode's, and damaged models end in DataErrors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "data_error.h"
#include "mixp/data/token_file.h"
#include "mixp/data/tokenizer.h"

namespace mixp::test {
namespace {

using data::testing::data_error;
using ::testing::HasSubstr;

// 916 lines, 24 KB (Debian's fortunes-min): a model of 512 pieces trains in well under a second.
const std::filesystem::path kFortunes = "/usr/share/games/fortunes/fortunes";

// Built with append: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s.append(p.string());
  s.push_back('\'');
  return s;
}

// One bpe model of 512 pieces for the whole suite.
class Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    data::TokenizerTrainOptions o;
    o.vocab_size = 512;
    o.model_type = data::SentencePieceType::bpe;
    o.threads = 1;
    data::train_tokenizer(kFortunes, model(), o);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::filesystem::path model() { return *dir_ / "tok" / "tokenizer.model"; }
  static TempDir* dir_;
};
TempDir* Tokenizer::dir_ = nullptr;

// The ids spm_encode prints for `text_file`, one line of ids per input line.
std::vector<std::vector<int>> spm_encode(const std::filesystem::path& model,
                                         const std::filesystem::path& text_file,
                                         const std::string& extra = "") {
  const auto r = run_shell("spm_encode --model=" + q(model) + " --output_format=id " + extra +
                           " " + q(text_file));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::vector<int>> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    lines.emplace_back();
    for (int id; ids >> id;) lines.back().push_back(id);
  }
  return lines;
}

std::vector<uint32_t> tokens_of(const std::filesystem::path& bin) {
  const auto c = data::TokenCorpus::load(bin, {.val_fraction = 0});
  std::vector<uint32_t> v(c.train_tokens().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = c.train_tokens()[i];
  return v;
}

TEST_F(Tokenizer, TrainedModelIsSpmTrainsAndDeterministic) {
  TempDir d;
  const auto r = run_shell("cd " + q(d.path()) + " && spm_train --input=" + q(kFortunes) +
                           " --model_prefix=peer --vocab_size=512 --model_type=bpe "
                           "--num_threads=1 --random_seed=0 --minloglevel=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The same pieces and scores as spm_train's with the options it was given (the files differ in
  // the trainer spec they record: input name, model prefix).
  const auto vocab_of = [](const std::filesystem::path& m) {
    const auto v = run_shell("spm_export_vocab --model=" + q(m));
    EXPECT_EQ(v.exit_code, 0) << v.err;
    return v.out;
  };
  const std::string peer_vocab = vocab_of(d / "peer.model");
  EXPECT_EQ(std::count(peer_vocab.begin(), peer_vocab.end(), '\n'), 512);
  EXPECT_EQ(vocab_of(model()), peer_vocab);
  data::TokenizerTrainOptions o;
  o.vocab_size = 512;
  o.model_type = data::SentencePieceType::bpe;
  o.threads = 1;
  data::train_tokenizer(kFortunes, d / "again.model", o);
  EXPECT_EQ(read_bytes(d / "again.model"), read_bytes(model()));
  const auto t = data::Tokenizer::load(model().parent_path());  // the folder finds the model
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.decode(t.encode("Hello, world")), "Hello, world");
}

TEST_F(Tokenizer, IdsEqualSpmEncodeLineByLine) {
  const auto tok = data::Tokenizer::load(model());
  TempDir d;
  // Every BOS mode against spm_encode's ids of the same lines (empty lines give none).
  const auto peer = spm_encode(model(), kFortunes);
  const auto peer_bos = spm_encode(model(), kFortunes, "--extra_options=bos");
  ASSERT_EQ(peer.size(), 916u);
  std::vector<uint32_t> none, line, file{1};
  for (size_t i = 0; i < peer.size(); ++i) {
    if (peer[i].empty()) continue;
    none.insert(none.end(), peer[i].begin(), peer[i].end());
    line.insert(line.end(), peer_bos[i].begin(), peer_bos[i].end());
    file.insert(file.end(), peer[i].begin(), peer[i].end());
  }
  ASSERT_GT(none.size(), 5000u);
  for (const auto& [mode, want] : {std::pair{data::BosMode::none, none},
                                   std::pair{data::BosMode::line, line},
                                   std::pair{data::BosMode::file, file}}) {
    const auto r = data::tokenize_corpus(tok, kFortunes, d / "t.bin", {.bos = mode});
    EXPECT_EQ(tokens_of(d / "t.bin"), want) << data::bos_mode_name(mode);
    EXPECT_EQ(r.tokens, int64_t(want.size()));
    EXPECT_EQ(r.width, data::TokenWidth::u16);
    EXPECT_EQ(data::TokenCorpus::load(d / "t.bin").vocab_size(), 512);
  }
  EXPECT_EQ(d.entries(), std::set<std::string>{"t.bin"});  // no temporary file left
}

TEST_F(Tokenizer, FolderInputAndBosPerFile) {
  const auto tok = data::Tokenizer::load(model());
  TempDir d;
  std::filesystem::create_directories(d / "in");
  write_text(d / "in" / "b.txt", "\n\n");  // no text: no BOS either
  write_text(d / "in" / "a.txt", "hello fortune\nsays\n");
  write_text(d / "in" / "c.txt", "world");
  write_text(d / "in" / "c.dat", "skipped as the text corpus skips it");
  data::tokenize_corpus(tok, d / "in", d / "t.bin", {.bos = data::BosMode::file});
  std::vector<uint32_t> want{1};
  for (const char* text : {"hello fortune", "says"}) {
    for (int id : tok.encode(text)) want.push_back(uint32_t(id));
  }
  want.push_back(1);
  for (int id : tok.encode("world")) want.push_back(uint32_t(id));
  EXPECT_EQ(tokens_of(d / "t.bin"), want);
  EXPECT_THROW((void)data::Tokenizer().vocab_size(), std::logic_error);
}

TEST_F(Tokenizer, StreamsAcrossBlocksAndLastLineWithoutNewline) {
  const auto tok = data::Tokenizer::load(model());
  TempDir d;
  // Lines across the 1 MiB read blocks, and a last line without '\n'.
  std::string text;
  std::mt19937 rng(5);
  const char* words[] = {"the ", "fortune ", "cookie ", "says ", "nothing.", "\n", "\n\n"};
  while (text.size() < (size_t(3) << 19)) text += words[rng() % 7];
  text += "last words";
  write_text(d / "big.txt", text);
  int calls = 0;
  int64_t last_done = 0;
  const auto r = data::tokenize_corpus(
      tok, d / "big.txt", d / "big.bin", {.bos = data::BosMode::none, .progress_every_bytes = 1 << 18},
      [&](int64_t done, int64_t total, int64_t) {
        ++calls;
        EXPECT_GE(done, last_done);
        EXPECT_EQ(total, int64_t(text.size()));
        last_done = done;
      });
  EXPECT_GE(calls, 3);
  EXPECT_EQ(last_done, int64_t(text.size()));
  EXPECT_EQ(r.input_bytes, int64_t(text.size()));
  EXPECT_EQ(tokens_of(d / "big.bin").size(), size_t(r.tokens));
  std::vector<uint32_t> want;
  for (const auto& l : spm_encode(model(), d / "big.txt")) want.insert(want.end(), l.begin(), l.end());
  EXPECT_EQ(tokens_of(d / "big.bin"), want);
}

TEST_F(Tokenizer, ErrorsNameWhatIsSupported) {
  TempDir d;
  std::filesystem::create_directories(d / "hf");
  write_text(d / "hf" / "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}");
  const std::string json = data_error([&] { data::Tokenizer::load(d / "hf"); });
  EXPECT_THAT(json, HasSubstr("tokenizer.json"));
  EXPECT_THAT(json, HasSubstr("mixp reads SentencePiece models (tokenizer.model"));
  EXPECT_THAT(data_error([&] { data::Tokenizer::load(d / "hf" / "tokenizer.json"); }),
              HasSubstr("Hugging Face fast tokenizer"));
  std::filesystem::create_directories(d / "empty");
  EXPECT_THAT(data_error([&] { data::Tokenizer::load(d / "empty"); }),
              HasSubstr("has no tokenizer.model"));
  EXPECT_THAT(data_error([&] { data::Tokenizer::load(d / "none.model"); }),
              HasSubstr("does not exist"));
  write_text(d / "text.model", "hello, I am not a model\n");
  EXPECT_THAT(data_error([&] { data::Tokenizer::load(d / "text.model"); }),
              HasSubstr("is not a valid SentencePiece model"));
  const auto tok = data::Tokenizer::load(model());
  write_bytes(d / "bin.txt", {'a', 'b', 0, 'c'});
  EXPECT_THAT(data_error([&] { data::tokenize_corpus(tok, d / "bin.txt", d / "o.bin"); }),
              HasSubstr("NUL byte at byte 2"));
  write_text(d / "blank.txt", "\n\n\n");
  EXPECT_THAT(data_error([&] { data::tokenize_corpus(tok, d / "blank.txt", d / "o.bin"); }),
              HasSubstr("holds no text"));
  EXPECT_FALSE(std::filesystem::exists(d / "o.bin"));
  EXPECT_THAT(data_error([&] {
                data::train_tokenizer(kFortunes, d / "big.model", {.vocab_size = 100000});
              }),
              HasSubstr("Vocabulary size too high (100000)"));
  EXPECT_FALSE(std::filesystem::exists(d / "big.model"));
}

// A tokenizer.model from a download is untrusted: truncations and random byte changes end in a
// DataError from the library's checks, or in a model that still encodes; never in a crash.
TEST_F(Tokenizer, DamagedModelsAreRefusedOrWork) {
  const auto bytes = read_bytes(model());
  const std::string good(bytes.begin(), bytes.end());
  int refused = 0, loaded = 0;
  const auto attempt = [&](const std::string& b) {
    try {
      const auto t = data::Tokenizer::from_bytes(b, "mutated.model");
      (void)t.encode("The fortune cookie says: nothing 123 \xC3\xA9t\xC3\xA9.");
      ++loaded;
    } catch (const data::DataError&) {
      ++refused;
    }
  };
  for (size_t n = 0; n < good.size(); n += 997) attempt(good.substr(0, n));
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string b = good;
    for (int k = 0; k < 1 + int(rng() % 4); ++k) b[rng() % b.size()] = char(rng());
    attempt(b);
  }
  EXPECT_GT(refused, 200);  // every truncation but the empty prefix's cases, and many mutations
  EXPECT_GT(loaded, 0);     // a changed score or piece byte is still a model
}

}  // namespace
}  // namespace mixp::test
