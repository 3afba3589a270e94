// Character-level (byte-level) language-model corpus for `mixp train --model gpt`.
//
// Source: one text file, or a folder whose top-level regular files are concatenated in byte-wise
// name order. In a folder, symbolic links are skipped (fortune's `*.u8` are links to the text
// files), as are `*.dat` files (strfile(1) indexes) and hidden files; files containing NUL bytes
// are refused as binary. Text is kept exactly as it is, fortune's "%" separator lines included. The
// default corpus is /usr/share/games/fortunes from Debian's `fortunes-min` package.
//
// Tokens: the vocabulary is the sorted set of byte values present in the whole corpus; token id i
// stands for vocab()[i]. The last `val_fraction` (default 10%) of the tokens, rounded down, are the
// validation split, the rest the training split.
//
// Batches are [batch x context] int32, row-major; targets[b][t] = the token after inputs[b][t].
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::data {

inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";
inline constexpr const char* kDefaultCorpusPackage = "fortunes-min";

struct CorpusOptions {
  double val_fraction = 0.1;  // in [0, 1): share of the tokens, taken from the end, for validation
};

struct TextBatch {
  int64_t batch = 0;  // rows actually filled (a last validation batch may be short)
  int64_t context = 0;
  std::vector<int32_t> inputs;   // batch * context
  std::vector<int32_t> targets;  // batch * context
};

class TextCorpus {
 public:
  // From a text file or a folder (see above). Throws DataError for a missing path (naming
  // `apt-get install fortunes-min` when it is the default folder), an empty corpus or binary files.
  static TextCorpus load(const std::filesystem::path& file_or_dir, const CorpusOptions& opt = {});
  // From text in memory; `source` names it in error messages.
  static TextCorpus from_text(std::string_view text, const CorpusOptions& opt = {},
                              std::string source = "<text>");

  const std::string& source() const { return source_; }
  const std::vector<std::filesystem::path>& files() const { return files_; }

  int vocab_size() const { return int(vocab_.size()); }
  const std::vector<uint8_t>& vocab() const { return vocab_; }   // id -> byte, ascending
  int32_t token_of(uint8_t byte) const { return id_of_[byte]; }  // -1 when absent
  // Throws DataError naming the position of the first byte outside the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws DataError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  int64_t size() const { return int64_t(tokens_.size()); }
  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int32_t> train_tokens() const { return {tokens_.data(), size_t(train_size_)}; }
  std::span<const int32_t> val_tokens() const {
    return {tokens_.data() + train_size_, tokens_.size() - size_t(train_size_)};
  }

  // Throws DataError stating the sizes when the training split has fewer than context + 1 tokens,
  // or when there is a validation split and it has fewer than context + 1.
  void require_context(int64_t context) const;

  // `batch` windows at offsets drawn uniformly from [0, train_size - context] with uniform_below
  // (random.h), in row order. Buffers must hold at least batch * context values.
  void sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const;
  TextBatch sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context) const;
  // The batch of training step `step` for `seed`: sample_batch with a generator seeded by
  // derive_seed(seed, step), so resuming at a step needs no generator state.
  TextBatch sample_batch_at(uint64_t seed, int64_t step, int64_t batch, int64_t context) const;

  // Validation: non-overlapping windows at offsets 0, context, 2*context, ... of the validation
  // split (window k needs tokens up to k*context + context inclusive), grouped `batch` at a time in
  // order; the last batch may be short. No validation split -> 0 batches.
  int64_t num_val_windows(int64_t context) const;
  int64_t num_val_batches(int64_t batch, int64_t context) const;
  // Fills batch `index` and returns its number of rows.
  int64_t val_batch(int64_t index, int64_t batch, int64_t context, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const;
  TextBatch val_batch(int64_t index, int64_t batch, int64_t context) const;

 private:
  void build(std::string_view text, const CorpusOptions& opt);
  void check_batch_args(int64_t batch, int64_t context, size_t in_size, size_t tgt_size,
                        const char* fn) const;

  std::string source_;
  std::vector<std::filesystem::path> files_;
  std::vector<uint8_t> vocab_;
  std::array<int32_t, 256> id_of_{};
  std::vector<int32_t> tokens_;
  int64_t train_size_ = 0;
};

// The files a corpus FILE|DIR is read from, in order, by the rules above (a file: itself; a folder:
// its top-level text files in byte-wise name order). Shared with `mixp tokenize` (tokenizer.h).
// Throws DataError for a missing path or a folder without text files.
std::vector<std::filesystem::path> text_corpus_files(const std::filesystem::path& file_or_dir);

// Text with learnable structure for tests: sentences "<subject> <verb> <object>.\n" from small
// fixed word lists chosen by a seeded generator, so a model can learn spelling (most characters
// follow deterministically from the previous ones) and grammar. Exactly `length` bytes.
std::string synthetic_corpus(int64_t length, uint64_t seed);

}  // namespace mixp::data
