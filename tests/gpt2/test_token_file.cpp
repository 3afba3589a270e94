// llm.c token files (data/token_file.h): the header, the memory-mapped tokens, the split (a
// NAME_val.bin beside NAME_train.bin, else the last 10%), sampling, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "common/temp_dir.h"
#include "mixp/data/error.h"
#include "mixp/data/random.h"
#include "mixp/data/token_file.h"

namespace mixp::test {
namespace {

std::vector<uint16_t> ramp(size_t n, uint16_t start = 0) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint16_t((start + i * 7) % 50257);
  return v;
}

std::string error_of(const std::filesystem::path& p) {
  try {
    data::TokenCorpus::load(p);
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

template <class F>
std::string error_of_write(F&& f) {
  try {
    f();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenFile, HeaderIsLlmcs) {
  TempDir dir;
  data::write_token_file(dir / "t.bin", ramp(10));
  const auto b = read_bytes(dir / "t.bin");
  ASSERT_EQ(b.size(), 1024u + 20u);
  int32_t h[3];
  std::memcpy(h, b.data(), sizeof h);
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 10);
  uint16_t t3;
  std::memcpy(&t3, b.data() + 1024 + 6, 2);
  EXPECT_EQ(t3, 21);
  EXPECT_TRUE(data::is_token_file(dir / "t.bin"));
  write_text(dir / "x.txt", "hello");
  EXPECT_FALSE(data::is_token_file(dir / "x.txt"));
}

TEST(TokenFile, SplitsAndSamplesLikeTheTextCorpus) {
  TempDir dir;
  const auto tokens = ramp(1000);
  data::write_token_file(dir / "t.bin", tokens);
  const auto c = data::TokenCorpus::load(dir / "t.bin");
  EXPECT_EQ(c.vocab_size(), 50257);
  EXPECT_EQ(c.size(), 1000);
  EXPECT_EQ(c.train_tokens().size(), 900u);
  EXPECT_EQ(c.val_tokens()[0], tokens[900]);
  std::vector<int32_t> x(4 * 16), y(4 * 16);
  std::mt19937_64 rng(data::derive_seed(3, 0));
  c.sample_batch(rng, 4, 16, x, y);
  for (size_t i = 0; i < x.size(); ++i) {
    // Each window is consecutive tokens; targets are the next token.
    const auto pos =
        size_t(std::find(tokens.begin(), tokens.end(), uint16_t(x[i])) - tokens.begin());
    EXPECT_EQ(y[i], tokens[pos + 1]);
  }
  EXPECT_EQ(c.num_val_windows(16), (100 - 1) / 16);
  const int64_t rows = c.val_batch(0, 4, 16, x, y);
  EXPECT_EQ(rows, 4);
  EXPECT_EQ(x[0], tokens[900]);
  EXPECT_EQ(y[15], tokens[916]);
}

TEST(TokenFile, ValidationFileBesideTheTrainingFile) {
  TempDir dir;
  data::write_token_file(dir / "shakespeare_train.bin", ramp(500));
  data::write_token_file(dir / "shakespeare_val.bin", ramp(200, 3));
  const auto c = data::TokenCorpus::load(dir / "shakespeare_train.bin");
  EXPECT_EQ(c.train_tokens().size(), 500u);
  EXPECT_EQ(c.val_tokens().size(), 200u);
  EXPECT_EQ(c.val_tokens()[0], 3);
  EXPECT_NE(c.source().find("shakespeare_val.bin"), std::string::npos);
}

TEST(TokenFile, ErrorsSayWhatIsWrong) {
  TempDir dir;
  EXPECT_NE(error_of(dir / "none.bin").find("cannot be opened"), std::string::npos);
  write_text(dir / "short.bin", "abc");
  EXPECT_NE(error_of(dir / "short.bin").find("less than llm.c's 1024-byte header"),
            std::string::npos);
  data::write_token_file(dir / "t.bin", ramp(50));
  auto b = read_bytes(dir / "t.bin");
  auto bad = b;
  bad[0] = 1;
  write_bytes(dir / "magic.bin", bad);
  EXPECT_NE(error_of(dir / "magic.bin").find("is not an llm.c token file"), std::string::npos);
  bad = b;
  bad[4] = 2;
  write_bytes(dir / "v2.bin", bad);
  EXPECT_NE(error_of(dir / "v2.bin").find(
                "has version 2; mixp reads llm.c's version 1 (uint16 ids) with magic 20240520 "
                "and version 7 (uint32 ids) with magic 20240801"),
            std::string::npos);
  bad = b;
  bad.resize(bad.size() - 2);
  write_bytes(dir / "cut.bin", bad);
  EXPECT_NE(error_of(dir / "cut.bin").find("truncated"), std::string::npos);
  std::vector<uint16_t> big = ramp(50);
  big[17] = 60000;
  data::write_token_file(dir / "big.bin", big);
  EXPECT_NE(error_of(dir / "big.bin").find("token 60000 at position 17"), std::string::npos);
  data::write_token_file(dir / "tiny.bin", ramp(20));
  const auto c = data::TokenCorpus::load(dir / "tiny.bin");
  try {
    c.require_context(32);
    ADD_FAILURE() << "no error";
  } catch (const data::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("too short for context 32"), std::string::npos);
  }
}

// The two widths of llm.c's files (data_common.py's HEADERS_INFO) and mixp's header[3] vocabulary.
TEST(TokenFile, Uint16AndUint32RoundTrip) {
  TempDir dir;
  std::vector<uint32_t> small(300), large(300);
  for (size_t i = 0; i < small.size(); ++i) {
    small[i] = uint32_t(i * 13 % 512);
    large[i] = uint32_t(i * 4099 % 70000);
  }
  data::write_token_file(dir / "s.bin", small, 512);
  data::write_token_file(dir / "l.bin", large, 70000);
  const auto bs = read_bytes(dir / "s.bin");
  const auto bl = read_bytes(dir / "l.bin");
  ASSERT_EQ(bs.size(), 1024u + 2 * 300);
  ASSERT_EQ(bl.size(), 1024u + 4 * 300);
  int32_t hs[4], hl[4];
  std::memcpy(hs, bs.data(), sizeof hs);
  std::memcpy(hl, bl.data(), sizeof hl);
  EXPECT_EQ(std::vector<int32_t>(hs, hs + 4), (std::vector<int32_t>{20240520, 1, 300, 512}));
  EXPECT_EQ(std::vector<int32_t>(hl, hl + 4), (std::vector<int32_t>{20240801, 7, 300, 70000}));
  uint32_t t5;
  std::memcpy(&t5, bl.data() + 1024 + 5 * 4, 4);
  EXPECT_EQ(t5, large[5]);
  EXPECT_TRUE(data::is_token_file(dir / "l.bin"));
  for (const auto& [name, want, vocab] :
       {std::tuple{"s.bin", small, 512}, std::tuple{"l.bin", large, 70000}}) {
    const auto c = data::TokenCorpus::load(dir / name, {.val_fraction = 0.1});
    EXPECT_EQ(c.vocab_size(), vocab);
    EXPECT_EQ(c.width(), vocab > 65536 ? data::TokenWidth::u32 : data::TokenWidth::u16);
    ASSERT_EQ(c.train_tokens().size(), 270u);
    for (size_t i = 0; i < 270; ++i) ASSERT_EQ(c.train_tokens()[i], want[i]) << name << " " << i;
    EXPECT_EQ(c.val_tokens()[0], want[270]);
    std::vector<int32_t> x(2 * 8), y(2 * 8);
    EXPECT_EQ(c.val_batch(0, 2, 8, x, y), 2);
    EXPECT_EQ(x[9], int32_t(want[279]));
    EXPECT_EQ(y[15], int32_t(want[286]));
  }
  // llm.c's own uint32 file (header[3] = 0) is Llama-3's vocabulary.
  auto zero = bl;
  std::memset(zero.data() + 12, 0, 4);
  write_bytes(dir / "llama3.bin", zero);
  EXPECT_EQ(data::TokenCorpus::load(dir / "llama3.bin").vocab_size(), 128256);
}

TEST(TokenFile, WidthAndVocabularyErrors) {
  TempDir dir;
  std::vector<uint32_t> ids(100, 7);
  ids[42] = 600;
  EXPECT_NE(error_of_write([&] { data::write_token_file(dir / "w.bin", ids, 512); })
                .find("token 600 at position 42 is outside the vocabulary of 512"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "w.bin"));
  EXPECT_TRUE(dir.entries().empty());  // nor a temporary file
  ids[42] = 8;
  data::write_token_file(dir / "a.bin", ids, 512);
  auto b = read_bytes(dir / "a.bin");
  const int32_t five = 5;  // header[3] = 5 < token 7
  std::memcpy(b.data() + 12, &five, 4);
  write_bytes(dir / "v5.bin", b);
  EXPECT_NE(error_of(dir / "v5.bin").find("token 7 at position 0 is outside the vocabulary of 5"),
            std::string::npos);
  const int32_t huge = 1 << 30;
  std::memcpy(b.data() + 12, &huge, 4);
  write_bytes(dir / "huge.bin", b);
  EXPECT_NE(error_of(dir / "huge.bin").find("states a vocabulary of 1073741824"),
            std::string::npos);
  // A uint32 file of another version names its own layout first.
  data::write_token_file(dir / "u32.bin", ids, 70000);
  auto v32 = read_bytes(dir / "u32.bin");
  const int32_t v8 = 8;
  std::memcpy(v32.data() + 4, &v8, 4);
  write_bytes(dir / "v8.bin", v32);
  EXPECT_NE(error_of(dir / "v8.bin").find(
                "has version 8; mixp reads llm.c's version 7 (uint32 ids) with magic 20240801 "
                "and version 1 (uint16 ids) with magic 20240520"),
            std::string::npos);
  // uint32 ids under the uint16 magic: the size disagrees with the count.
  data::write_token_file(dir / "l.bin", ids, 70000);
  b = read_bytes(dir / "l.bin");
  const int32_t m16 = 20240520, v1 = 1;
  std::memcpy(b.data(), &m16, 4);
  std::memcpy(b.data() + 4, &v1, 4);
  std::memset(b.data() + 12, 0, 4);
  write_bytes(dir / "mixed.bin", b);
  EXPECT_NE(error_of(dir / "mixed.bin").find("truncated or not a token file"), std::string::npos);
  // A validation file of another tokenizer.
  data::write_token_file(dir / "x_train.bin", ids, 512);
  data::write_token_file(dir / "x_val.bin", ids, 70000);
  EXPECT_NE(error_of(dir / "x_train.bin").find("differ; tokenize both with the same tokenizer"),
            std::string::npos);
}

}  // namespace
}  // namespace mixp::test
