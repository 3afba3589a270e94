// Writing llm.c token files (data/token_file.h): the streaming writer and write_token_file.
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mixp/data/error.h"
#include "mixp/data/token_file.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {
constexpr size_t kHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

void check_vocab(const fs::path& path, int64_t vocab) {
  if (vocab < 0 || vocab > kMaxTokenFileVocab) {
    throw DataError(fmt::format("token file '{}': a vocabulary of {} is outside [1, {}]",
                                path.string(), vocab, kMaxTokenFileVocab));
  }
}
}  // namespace

TokenWidth token_width_for(int64_t vocab) {
  return vocab <= 65536 ? TokenWidth::u16 : TokenWidth::u32;
}

TokenSpan TokenSpan::subspan(size_t offset, size_t count) const {
  const size_t w = width_ == TokenWidth::u16 ? 2 : 4;
  return {data_ + offset * w, count, width_};
}

struct TokenFileWriter::File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

TokenFileWriter::TokenFileWriter(const fs::path& path, int64_t vocab)
    : path_(path), tmp_(path.string() + ".tmp-mixp"), vocab_(vocab),
      width_(vocab == 0 ? TokenWidth::u16 : token_width_for(vocab)),
      file_(std::make_unique<File>()) {
  check_vocab(path, vocab);
  file_->f = std::fopen(tmp_.c_str(), "wb");
  if (!file_->f) {
    throw DataError(fmt::format("cannot write token file '{}': {}", path.string(),
                                std::strerror(errno)));
  }
  // The header is written again with the count by commit(); this reserves its bytes.
  const std::array<int32_t, kTokenFileHeaderInts> zero{};
  if (std::fwrite(zero.data(), 1, kHeaderBytes, file_->f) != kHeaderBytes) {
    throw DataError(fmt::format("cannot write token file '{}'", path.string()));
  }
}

TokenFileWriter::~TokenFileWriter() {
  if (file_) {
    file_.reset();
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

void TokenFileWriter::append(std::span<const uint32_t> ids) {
  if (!file_) throw DataError(fmt::format("token file '{}' is already written", path_.string()));
  // vocab 0 (GPT-2's file as llm.c writes it) checks only that ids fit uint16: tests write ids
  // outside GPT-2's vocabulary on purpose, to test the reader.
  const int64_t limit = vocab_ == 0 ? 65536 : vocab_;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (int64_t(ids[i]) >= limit) {
      throw DataError(fmt::format(
          "token file '{}': token {} at position {} is outside the vocabulary of {}",
          path_.string(), ids[i], count_ + int64_t(i), limit));
    }
  }
  if (count_ + int64_t(ids.size()) > int64_t(INT32_MAX)) {
    throw DataError(fmt::format(
        "token file '{}': more than {} tokens do not fit the header's int32 count (llm.c's "
        "limit); split the input into several files",
        path_.string(), INT32_MAX));
  }
  size_t written = 0;
  if (width_ == TokenWidth::u16) {
    std::vector<uint16_t> narrow(ids.begin(), ids.end());
    written = std::fwrite(narrow.data(), 2, narrow.size(), file_->f);
  } else {
    written = std::fwrite(ids.data(), 4, ids.size(), file_->f);
  }
  if (written != ids.size()) {
    throw DataError(fmt::format("cannot write token file '{}': {}", path_.string(),
                                std::strerror(errno)));
  }
  count_ += int64_t(ids.size());
}

void TokenFileWriter::commit() {
  if (!file_) throw DataError(fmt::format("token file '{}' is already written", path_.string()));
  std::array<int32_t, kTokenFileHeaderInts> header{};
  const bool u16 = width_ == TokenWidth::u16;
  header[0] = u16 ? kTokenFileMagic : kTokenFileMagic32;
  header[1] = u16 ? kTokenFileVersion : kTokenFileVersion32;
  header[2] = int32_t(count_);
  header[3] = int32_t(vocab_);
  std::FILE* f = file_->f;
  const bool ok = std::fseek(f, 0, SEEK_SET) == 0 &&
                  std::fwrite(header.data(), 1, kHeaderBytes, f) == kHeaderBytes &&
                  std::fflush(f) == 0;
  const int closed = std::fclose(f);
  file_->f = nullptr;
  if (!ok || closed != 0) {
    throw DataError(fmt::format("cannot write token file '{}': {}", path_.string(),
                                std::strerror(errno)));
  }
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) {
    throw DataError(
        fmt::format("cannot write token file '{}': {}", path_.string(), ec.message()));
  }
  file_.reset();
}

void write_token_file(const fs::path& path, std::span<const uint32_t> tokens, int64_t vocab) {
  TokenFileWriter w(path, vocab);
  w.append(tokens);
  w.commit();
}

void write_token_file(const fs::path& path, std::span<const uint16_t> tokens) {
  TokenFileWriter w(path, 0);
  std::vector<uint32_t> wide(tokens.begin(), tokens.end());
  w.append(wide);
  w.commit();
}

}  // namespace mixp::data
