// Token files of llm.c (its dev/data/*.bin, written by dev/data/data_common.py's write_datafile):
// a header of 256 little-endian int32 (magic, version, token count, the rest 0) and then `count`
// token ids, in one of llm.c's two variants (data_common.py's HEADERS_INFO):
//   - "gpt-2":   magic 20240520, version 1, uint16 ids;
//   - "llama-3": magic 20240801, version 7, uint32 ids (vocabularies above 65536).
// mixp adds one field llm.c leaves 0: header[3] is the vocabulary size (0: the variant's default,
// GPT-2's 50257 or Llama-3's 128256). `mixp tokenize` (data/tokenizer.h) writes such files from
// text; any tool that writes llm.c's files works too. `mixp train --data FILE.bin` reads them.
//
// TokenCorpus memory-maps the file (nothing is copied: a 10 GB file costs 10 GB of address space,
// not of memory) and samples batches exactly as TextCorpus does (text_corpus.h: offsets from
// uniform_below, batch `step` from derive_seed(seed, step)), so everything the Trainer does with a
// byte corpus it does with a token file. Validation: when the file is NAME_train.bin and
// NAME_val.bin lies beside it (llm.c's naming), that file; otherwise the last val_fraction of the
// tokens, as for text.
//
// Vocabulary: header[3], else the variant's default; load() checks every token is below it and
// names the first one that is not.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "mixp/data/text_corpus.h"

namespace mixp::data {

inline constexpr int32_t kTokenFileMagic = 20240520;  // uint16 ids ("gpt-2")
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int32_t kTokenFileMagic32 = 20240801;  // uint32 ids ("llama-3")
inline constexpr int32_t kTokenFileVersion32 = 7;
inline constexpr int kTokenFileHeaderInts = 256;
inline constexpr int32_t kGpt2TokenVocab = 50257;
inline constexpr int32_t kLlama3TokenVocab = 128256;
// The largest vocabulary a header may state (2^24): more is a corrupt header, not a model (the
// largest released vocabularies have about 2^18), and would size the embedding from a file.
inline constexpr int64_t kMaxTokenFileVocab = int64_t(1) << 24;

// The width of a file's ids: uint16 when every id of the vocabulary fits (vocab <= 65536).
enum class TokenWidth { u16, u32 };
TokenWidth token_width_for(int64_t vocab);

// A read-only view of a file's ids, either width.
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(const void* data, size_t count, TokenWidth width)
      : data_(static_cast<const std::byte*>(data)), count_(count), width_(width) {}
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  TokenWidth width() const { return width_; }
  uint32_t operator[](size_t i) const {
    return width_ == TokenWidth::u16 ? reinterpret_cast<const uint16_t*>(data_)[i]
                                     : reinterpret_cast<const uint32_t*>(data_)[i];
  }
  TokenSpan subspan(size_t offset, size_t count) const;
  std::span<const std::byte> bytes() const {
    return {data_, count_ * (width_ == TokenWidth::u16 ? 2u : 4u)};
  }

 private:
  const std::byte* data_ = nullptr;
  size_t count_ = 0;
  TokenWidth width_ = TokenWidth::u16;
};

// True when `path` is a regular file starting with either token-file magic (false for a folder, a
// text file, a file shorter than 4 bytes).
bool is_token_file(const std::filesystem::path& path);

// Writes a token file in pieces, for inputs larger than memory: the ids go to PATH.tmp-mixp, and
// commit() writes the count into the header and renames it to PATH. Atomic: a writer destroyed
// without commit() (an error on the way) removes the temporary file and leaves no PATH.
class TokenFileWriter {
 public:
  // `vocab` (1 to kMaxTokenFileVocab) goes into header[3] and picks the width (token_width_for);
  // 0 writes GPT-2's file exactly as llm.c does (uint16, header[3] = 0). Throws DataError when
  // the file cannot be created.
  TokenFileWriter(const std::filesystem::path& path, int64_t vocab);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws DataError for an id >= vocab (naming it and its position) or a write error.
  void append(std::span<const uint32_t> ids);
  int64_t count() const { return count_; }
  TokenWidth width() const { return width_; }
  void commit();

 private:
  std::filesystem::path path_, tmp_;
  int64_t vocab_;
  TokenWidth width_;
  int64_t count_ = 0;
  struct File;
  std::unique_ptr<File> file_;
};

// Writes `tokens` as a GPT-2 token file (uint16, header[3] = 0: GPT-2's vocabulary), for tests
// and tools that make data. Atomic: a failure leaves no file. Throws DataError.
void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens);
// Writes `tokens` with vocabulary `vocab` (header[3]), uint16 or uint32 as it needs.
void write_token_file(const std::filesystem::path& path, std::span<const uint32_t> tokens,
                      int64_t vocab);

class TokenCorpus {
 public:
  // Throws DataError naming the file and what is wrong: missing, not a token file (magic), an
  // unknown version, a vocabulary outside [1, 2^24], a count that disagrees with the file size, a
  // token >= the vocabulary. A NAME_val.bin beside must have the same variant and vocabulary.
  static TokenCorpus load(const std::filesystem::path& file, const CorpusOptions& opt = {});
  TokenCorpus();
  ~TokenCorpus();
  TokenCorpus(TokenCorpus&&) noexcept;
  TokenCorpus& operator=(TokenCorpus&&) noexcept;

  const std::string& source() const { return source_; }
  int vocab_size() const { return vocab_; }
  TokenWidth width() const { return train_.width(); }
  int64_t size() const { return int64_t(train_.size() + val_.size()); }
  TokenSpan train_tokens() const { return train_; }
  TokenSpan val_tokens() const { return val_; }

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
  TokenSpan train_, val_;
  int vocab_ = kGpt2TokenVocab;
};

}  // namespace mixp::data
