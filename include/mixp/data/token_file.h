// Token files of llm.c (its dev/data/*.bin, written by dev/data/data_common.py's write_datafile):
// a header of 256 little-endian int32 (magic 20240520, version 1, token count, the rest 0) and
// then `count` uint16 GPT-2 token ids. A user tokenizes with their own tool and passes the file to
// `mixp train --model gpt2 --data FILE.bin`.
//
// TokenCorpus memory-maps the file (nothing is copied: a 10 GB file costs 10 GB of address space,
// not of memory) and samples batches exactly as TextCorpus does (text_corpus.h: offsets from
// uniform_below, batch `step` from derive_seed(seed, step)), so everything the Trainer does with a
// byte corpus it does with a token file. Validation: when the file is NAME_train.bin and
// NAME_val.bin lies beside it (llm.c's naming), that file; otherwise the last val_fraction of the
// tokens, as for text.
//
// Vocabulary: GPT-2's 50257 (nn::kGpt2Vocab); load() checks every token is below it and names the
// first one that is not.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "mixp/data/text_corpus.h"

namespace mixp::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int kTokenFileHeaderInts = 256;
inline constexpr int32_t kGpt2TokenVocab = 50257;

// True when `path` is a regular file starting with the token-file magic (false for a folder, a
// text file, a file shorter than 4 bytes).
bool is_token_file(const std::filesystem::path& path);

// Writes `tokens` as a token file (for tests and for tools that make data). Atomic: a failure
// leaves no file. Throws DataError.
void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens);

class TokenCorpus {
 public:
  // Throws DataError naming the file and what is wrong: missing, not a token file (magic), an
  // unknown version, a count that disagrees with the file size, a token >= 50257.
  static TokenCorpus load(const std::filesystem::path& file, const CorpusOptions& opt = {});
  TokenCorpus();
  ~TokenCorpus();
  TokenCorpus(TokenCorpus&&) noexcept;
  TokenCorpus& operator=(TokenCorpus&&) noexcept;

  const std::string& source() const { return source_; }
  int vocab_size() const { return kGpt2TokenVocab; }
  int64_t size() const { return int64_t(train_.size() + val_.size()); }
  std::span<const uint16_t> train_tokens() const { return train_; }
  std::span<const uint16_t> val_tokens() const { return val_; }

  // As TextCorpus (text_corpus.h).
  void require_context(int64_t context) const;
  void sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const;
  int64_t num_val_windows(int64_t context) const;
  int64_t val_batch(int64_t index, int64_t batch, int64_t context, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const;

  struct Mapping;  // a read-only mmap of one file (token_file.cpp)

 private:
  std::string source_;
  std::unique_ptr<Mapping> train_map_, val_map_;
  std::span<const uint16_t> train_, val_;
};

}  // namespace mixp::data
