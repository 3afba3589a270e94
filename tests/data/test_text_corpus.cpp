// Character-level corpus: vocabulary, encoding, splits, batch sampling and folder loading.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.h"
#include "data/data_error.h"
#include "mixp/data/text_corpus.h"

namespace mixp::data {
namespace {

using testing::data_error;
using ::testing::HasSubstr;
using mixp::test::TempDir;
using mixp::test::write_text;

TEST(TextCorpus, VocabularyAndRoundTrip) {
  const std::string text = "hello world\n%\nhello\n";
  const TextCorpus c = TextCorpus::from_text(text);
  const std::vector<uint8_t> want{'\n', ' ', '%', 'd', 'e', 'h', 'l', 'o', 'r', 'w'};
  EXPECT_EQ(c.vocab(), want);
  EXPECT_EQ(c.vocab_size(), 10);
  EXPECT_EQ(c.token_of('\n'), 0);
  EXPECT_EQ(c.token_of('w'), 9);
  EXPECT_EQ(c.token_of('z'), -1);
  EXPECT_EQ(c.size(), int64_t(text.size()));
  EXPECT_EQ(c.decode(c.tokens()), text);
  EXPECT_EQ(c.encode("hold"), (std::vector<int32_t>{5, 7, 6, 3}));
  EXPECT_THAT(data_error([&] { c.encode("hoz"); }),
              HasSubstr("byte 0x7A at position 2 is not in the vocabulary"));
  const std::vector<int32_t> bad{1, 10};
  EXPECT_THAT(data_error([&] { c.decode(bad); }),
              HasSubstr("token id 10 at position 1 is outside the vocabulary [0, 10)"));
}

TEST(TextCorpus, SplitIsLastTenPercent) {
  const std::string text = synthetic_corpus(1005, 1);
  const TextCorpus c = TextCorpus::from_text(text);
  EXPECT_EQ(c.train_tokens().size(), 905u);
  EXPECT_EQ(c.val_tokens().size(), 100u);
  EXPECT_EQ(c.decode(c.val_tokens()), text.substr(905));
  CorpusOptions none;
  none.val_fraction = 0;
  const TextCorpus all = TextCorpus::from_text(text, none);
  EXPECT_EQ(all.val_tokens().size(), 0u);
  EXPECT_EQ(all.num_val_batches(4, 8), 0);
  none.val_fraction = 1.0;
  EXPECT_THROW(TextCorpus::from_text(text, none), std::invalid_argument);
}

TEST(TextCorpus, TooShortForContext) {
  const TextCorpus c = TextCorpus::from_text(std::string(100, 'a') + "b", {}, "tiny.txt");
  // 101 tokens: 91 train, 10 val.
  std::string m = data_error([&] { c.require_context(128); });
  EXPECT_THAT(m, HasSubstr("'tiny.txt' is too short for context 128: its training split has 91 "
                           "tokens (of 101 in all) but one window needs context + 1 = 129"));
  std::mt19937_64 rng(1);
  m = data_error([&] { c.sample_batch(rng, 2, 128); });
  EXPECT_THAT(m, HasSubstr("too short for context 128"));
  m = data_error([&] { c.require_context(20); });
  EXPECT_THAT(m, HasSubstr("validation split (the last part) has 10 tokens of 101"));
  EXPECT_NO_THROW(c.require_context(9));
  EXPECT_THAT(data_error([&] { TextCorpus::from_text(""); }), HasSubstr("is empty"));
}

TEST(TextCorpus, SampleBatchTargetsAreInputsShiftedByOne) {
  const std::string text = synthetic_corpus(5000, 3);
  const TextCorpus c = TextCorpus::from_text(text);
  const std::string train = text.substr(0, size_t(c.train_tokens().size()));
  std::mt19937_64 rng(42);
  const int64_t B = 8, T = 32;
  const TextBatch b = c.sample_batch(rng, B, T);
  ASSERT_EQ(b.inputs.size(), size_t(B * T));
  ASSERT_EQ(b.targets.size(), size_t(B * T));
  std::set<std::string> starts;
  for (int64_t r = 0; r < B; ++r) {
    const std::span<const int32_t> in(b.inputs.data() + r * T, size_t(T));
    const std::span<const int32_t> tg(b.targets.data() + r * T, size_t(T));
    for (int64_t t = 0; t + 1 < T; ++t) ASSERT_EQ(tg[size_t(t)], in[size_t(t + 1)]);
    // Each row is a window of the training split followed by its next character.
    const std::string window = c.decode(in) + c.decode(tg.subspan(size_t(T - 1)));
    EXPECT_NE(train.find(window), std::string::npos);
  }
  // Deterministic from the seed; sample_batch_at is reproducible from (seed, step).
  std::mt19937_64 rng2(42);
  EXPECT_EQ(c.sample_batch(rng2, B, T).inputs, b.inputs);
  EXPECT_EQ(c.sample_batch_at(9, 5, B, T).inputs, c.sample_batch_at(9, 5, B, T).inputs);
  EXPECT_NE(c.sample_batch_at(9, 5, B, T).inputs, c.sample_batch_at(9, 6, B, T).inputs);
}

TEST(TextCorpus, SampleBatchReachesBothEnds) {
  // Offsets are uniform over every valid start, the first and the last included.
  const TextCorpus c = TextCorpus::from_text("abcdefghij", {0.0});
  std::mt19937_64 rng(5);
  std::set<int32_t> firsts;
  for (int i = 0; i < 200; ++i) firsts.insert(c.sample_batch(rng, 1, 4).inputs[0]);
  EXPECT_EQ(firsts,
            (std::set<int32_t>{0, 1, 2, 3, 4, 5}));  // starts a..f; f+4 = j is the last target
}

TEST(TextCorpus, ValidationBatchesAreSequential) {
  CorpusOptions o;
  o.val_fraction = 0.5;
  const std::string text =
      std::string(50, 'x') + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN";
  const TextCorpus c = TextCorpus::from_text(text, o);
  ASSERT_EQ(c.val_tokens().size(), 50u);
  EXPECT_EQ(c.num_val_windows(7), 7);  // (50 - 1) / 7
  EXPECT_EQ(c.num_val_batches(3, 7), 3);
  const TextBatch b0 = c.val_batch(0, 3, 7);
  EXPECT_EQ(b0.batch, 3);
  EXPECT_EQ(c.decode(std::span(b0.inputs).subspan(0, 7)), "0123456");
  EXPECT_EQ(c.decode(std::span(b0.targets).subspan(0, 7)), "1234567");
  EXPECT_EQ(c.decode(std::span(b0.inputs).subspan(7, 7)), "789abcd");
  const TextBatch b2 = c.val_batch(2, 3, 7);
  EXPECT_EQ(b2.batch, 1);  // windows 6 only
  EXPECT_EQ(b2.inputs.size(), 7u);
  EXPECT_EQ(c.decode(b2.inputs), "GHIJKLM");
  EXPECT_EQ(c.decode(b2.targets), "HIJKLMN");
  EXPECT_THROW(c.val_batch(3, 3, 7), std::out_of_range);
}

TEST(TextCorpus, FolderIsSortedFilesWithoutLinksOrIndexes) {
  TempDir d;
  write_text(d / "b.txt", "second\n%\n");
  write_text(d / "a", "first\n%\n");
  write_text(d / "a.dat", std::string("\x01\x02\0\0", 4));  // strfile index: skipped
  write_text(d / ".hidden", "no");
  std::filesystem::create_symlink(d / "a", d / "a.u8");
  const TextCorpus c = TextCorpus::load(d.path());
  ASSERT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.files()[0].filename(), "a");
  EXPECT_EQ(c.files()[1].filename(), "b.txt");
  EXPECT_EQ(c.decode(c.tokens()), "first\n%\nsecond\n%\n");
  const TextCorpus f = TextCorpus::load(d / "b.txt");
  EXPECT_EQ(f.decode(f.tokens()), "second\n%\n");
  write_text(d / "c.bin", std::string("ab\0cd", 5));
  EXPECT_THAT(data_error([&] { TextCorpus::load(d.path()); }),
              HasSubstr("has a NUL byte at byte 2, so it is not text"));
}

TEST(TextCorpus, MissingPath) {
  TempDir d;
  std::string m = data_error([&] { TextCorpus::load(d / "nope.txt"); });
  EXPECT_THAT(m, HasSubstr("does not exist"));
  EXPECT_THAT(m, HasSubstr("fortunes-min"));
  std::filesystem::create_directories(d / "empty");
  m = data_error([&] { TextCorpus::load(d / "empty"); });
  EXPECT_THAT(m, HasSubstr("has no text files"));
}

TEST(TextCorpus, DefaultFortunesWhenInstalled) {
  if (!std::filesystem::exists(std::string(kDefaultCorpusDir) + "/fortunes")) {
    GTEST_SKIP() << "apt-get install fortunes-min to run this test";
  }
  const TextCorpus c = TextCorpus::load(kDefaultCorpusDir);
  std::vector<std::string> names;
  for (const auto& f : c.files()) names.push_back(f.filename().string());
  EXPECT_THAT(names, ::testing::Contains("fortunes"));
  for (const auto& n : names) EXPECT_FALSE(n.ends_with(".dat") || n.ends_with(".u8")) << n;
  EXPECT_GT(c.size(), 10000);
  EXPECT_GT(c.vocab_size(), 50);
  EXPECT_NE(c.decode(c.tokens()).find("\n%\n"), std::string::npos);
  EXPECT_NO_THROW(c.require_context(128));
  EXPECT_GT(c.num_val_batches(16, 128), 0);
}

TEST(TextCorpus, SyntheticIsDeterministicAndStructured) {
  const std::string a = synthetic_corpus(2000, 11);
  EXPECT_EQ(a.size(), 2000u);
  EXPECT_EQ(a, synthetic_corpus(2000, 11));
  EXPECT_NE(a, synthetic_corpus(2000, 12));
  const TextCorpus c = TextCorpus::from_text(a);
  EXPECT_LT(c.vocab_size(), 30);
  EXPECT_NE(a.find(".\n"), std::string::npos);
}

}  // namespace
}  // namespace mixp::data
