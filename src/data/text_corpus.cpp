// Byte-level corpus: loading, vocabulary, and batch sampling. Offsets come from uniform_below so a
// seed gives the same batches with every standard library (see random.h).
#include "mixp/data/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "mixp/data/error.h"
#include "mixp/data/random.h"
#include "token_windows.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {

std::string read_text_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot open '{}' for reading (permissions?)", p.string()));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw DataError(fmt::format("error reading '{}'", p.string()));
  const size_t nul = s.find('\0');
  if (nul != std::string::npos) {
    throw DataError(fmt::format(
        "'{}' has a NUL byte at byte {}, so it is not text; pass a text file, or remove binary "
        "files from the corpus folder",
        p.string(), nul));
  }
  return s;
}

std::string missing_hint(const fs::path& p) {
  if (p == fs::path(kDefaultCorpusDir)) {
    return fmt::format(
        "the default corpus comes from Debian's package: `apt-get install {}`; or "
        "pass --data FILE|DIR with your own text",
        kDefaultCorpusPackage);
  }
  return fmt::format("pass --data FILE|DIR with text (e.g. {} from `apt-get install {}`)",
                     kDefaultCorpusDir, kDefaultCorpusPackage);
}

}  // namespace

std::vector<fs::path> text_corpus_files(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataError(
        fmt::format("text corpus '{}' does not exist; {}", path.string(), missing_hint(path)));
  }
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink() || !e.is_regular_file() || name.starts_with(".") ||
        e.path().extension() == ".dat") {
      continue;
    }
    files.push_back(e.path());
  }
  // Byte-wise name order, independent of locale and of the directory's on-disk order.
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  if (files.empty()) {
    throw DataError(
        fmt::format("text corpus folder '{}' has no text files (symbolic links, "
                    "hidden and *.dat files are skipped); {}",
                    path.string(), missing_hint(path)));
  }
  return files;
}

TextCorpus TextCorpus::load(const fs::path& path, const CorpusOptions& opt) {
  TextCorpus c;
  c.source_ = path.string();
  c.files_ = text_corpus_files(path);
  std::string text;
  for (const auto& f : c.files_) text += read_text_file(f);
  c.build(text, opt);
  return c;
}

TextCorpus TextCorpus::from_text(std::string_view text, const CorpusOptions& opt,
                                 std::string source) {
  TextCorpus c;
  c.source_ = std::move(source);
  c.build(text, opt);
  return c;
}

void TextCorpus::build(std::string_view text, const CorpusOptions& opt) {
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("val_fraction {} outside [0, 1)", opt.val_fraction));
  }
  if (text.empty()) {
    throw DataError(fmt::format("text corpus '{}' is empty; give it some text", source_));
  }
  bool present[256] = {};
  for (char ch : text) present[uint8_t(ch)] = true;
  id_of_.fill(-1);
  vocab_.clear();
  for (int b = 0; b < 256; ++b) {
    if (present[b]) {
      id_of_[size_t(b)] = int32_t(vocab_.size());
      vocab_.push_back(uint8_t(b));
    }
  }
  tokens_.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens_[i] = id_of_[uint8_t(text[i])];
  const int64_t n = int64_t(tokens_.size());
  const int64_t val = int64_t(std::floor(double(n) * opt.val_fraction));
  train_size_ = n - val;
}

std::vector<int32_t> TextCorpus::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t id = id_of_[uint8_t(text[i])];
    if (id < 0) {
      throw DataError(
          fmt::format("byte 0x{:02X} at position {} is not in the vocabulary of "
                      "corpus '{}' ({} symbols)",
                      uint8_t(text[i]), i, source_, vocab_.size()));
    }
    ids[i] = id;
  }
  return ids;
}

std::string TextCorpus::decode(std::span<const int32_t> ids) const {
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      throw DataError(
          fmt::format("token id {} at position {} is outside the vocabulary [0, {}) "
                      "of corpus '{}'",
                      ids[i], i, vocab_size(), source_));
    }
    s[i] = char(vocab_[size_t(ids[i])]);
  }
  return s;
}

void TextCorpus::require_context(int64_t context) const {
  if (context <= 0) throw std::invalid_argument(fmt::format("context {} must be > 0", context));
  if (train_size_ < context + 1) {
    throw DataError(fmt::format(
        "text corpus '{}' is too short for context {}: its training split has {} tokens (of {} in "
        "all) but one window needs context + 1 = {}; use a longer corpus or a smaller --context",
        source_, context, train_size_, size(), context + 1));
  }
  const int64_t nval = size() - train_size_;
  if (nval > 0 && nval < context + 1) {
    throw DataError(fmt::format(
        "text corpus '{}' is too short for context {}: its validation split (the last part) has {} "
        "tokens of {} but one window needs context + 1 = {}; use a longer corpus or a smaller "
        "--context",
        source_, context, nval, size(), context + 1));
  }
}

void TextCorpus::check_batch_args(int64_t batch, int64_t context, size_t in_size, size_t tgt_size,
                                  const char* fn) const {
  if (batch <= 0) throw std::invalid_argument(fmt::format("{}: batch {} must be > 0", fn, batch));
  require_context(context);
  const size_t need = size_t(batch * context);
  if (in_size < need || tgt_size < need) {
    throw std::invalid_argument(
        fmt::format("{}: buffers of {} and {} values are too small for batch {} x context {} = {}",
                    fn, in_size, tgt_size, batch, context, need));
  }
}

void TextCorpus::sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context,
                              std::span<int32_t> inputs, std::span<int32_t> targets) const {
  check_batch_args(batch, context, inputs.size(), targets.size(), "sample_batch");
  const uint64_t offsets = uint64_t(train_size_ - context);  // valid starts: [0, offsets)
  const size_t ctx = size_t(context);
  for (int64_t b = 0; b < batch; ++b) {
    const size_t off = size_t(uniform_below(rng, offsets));
    std::memcpy(inputs.data() + size_t(b) * ctx, tokens_.data() + off, ctx * sizeof(int32_t));
    std::memcpy(targets.data() + size_t(b) * ctx, tokens_.data() + off + 1, ctx * sizeof(int32_t));
  }
}

TextBatch TextCorpus::sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context) const {
  check_batch_args(batch, context, SIZE_MAX, SIZE_MAX, "sample_batch");
  TextBatch tb{batch, context, std::vector<int32_t>(size_t(batch * context)),
               std::vector<int32_t>(size_t(batch * context))};
  sample_batch(rng, batch, context, tb.inputs, tb.targets);
  return tb;
}

TextBatch TextCorpus::sample_batch_at(uint64_t seed, int64_t step, int64_t batch,
                                      int64_t context) const {
  std::mt19937_64 rng(derive_seed(seed, uint64_t(step)));
  return sample_batch(rng, batch, context);
}

int64_t TextCorpus::num_val_windows(int64_t context) const {
  require_context(context);
  const int64_t nval = size() - train_size_;
  return nval == 0 ? 0 : (nval - 1) / context;
}

int64_t TextCorpus::num_val_batches(int64_t batch, int64_t context) const {
  if (batch <= 0) throw std::invalid_argument(fmt::format("batch {} must be > 0", batch));
  return (num_val_windows(context) + batch - 1) / batch;
}

int64_t TextCorpus::val_batch(int64_t index, int64_t batch, int64_t context,
                              std::span<int32_t> inputs, std::span<int32_t> targets) const {
  check_batch_args(batch, context, inputs.size(), targets.size(), "val_batch");
  return detail::copy_val_windows(tokens_.data() + train_size_, num_val_windows(context), index,
                                  batch, context, inputs, targets);
}

TextBatch TextCorpus::val_batch(int64_t index, int64_t batch, int64_t context) const {
  check_batch_args(batch, context, SIZE_MAX, SIZE_MAX, "val_batch");
  TextBatch tb{batch, context, std::vector<int32_t>(size_t(batch * context)),
               std::vector<int32_t>(size_t(batch * context))};
  tb.batch = val_batch(index, batch, context, tb.inputs, tb.targets);
  tb.inputs.resize(size_t(tb.batch * context));
  tb.targets.resize(size_t(tb.batch * context));
  return tb;
}

std::string synthetic_corpus(int64_t length, uint64_t seed) {
  if (length < 0)
    throw std::invalid_argument(fmt::format("synthetic_corpus: length {} < 0", length));
  static constexpr std::string_view kSubjects[] = {"the cat", "a dog", "my friend", "the robot",
                                                   "our teacher"};
  static constexpr std::string_view kVerbs[] = {"sees", "likes", "paints", "finds", "follows"};
  static constexpr std::string_view kObjects[] = {"the moon", "a red ball", "some bread",
                                                  "the river", "an old map"};
  std::mt19937_64 rng(derive_seed(seed, 0));
  std::string s;
  s.reserve(size_t(length) + 32);
  while (int64_t(s.size()) < length) {
    s += kSubjects[uniform_below(rng, 5)];
    s += ' ';
    s += kVerbs[uniform_below(rng, 5)];
    s += ' ';
    s += kObjects[uniform_below(rng, 5)];
    s += ".\n";
  }
  s.resize(size_t(length));
  return s;
}

}  // namespace mixp::data
