// SentencePiece tokenizers through libsentencepiece (data/tokenizer.h).
#include "mixp/data/tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "mixp/data/error.h"
#include "mixp/data/text_corpus.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSupported =
    "mixp reads SentencePiece models (tokenizer.model: Llama-2, TinyLlama, Mistral, or one made "
    "by `mixp tokenize --train`)";

// A folder or file that holds only Hugging Face's tokenizer.json.
[[noreturn]] void refuse_tokenizer_json(const fs::path& json) {
  throw DataError(fmt::format(
      "'{}' is a Hugging Face fast tokenizer (tokenizer.json: byte-level BPE as GPT-2, Llama-3 "
      "and Qwen2 use), which mixp cannot read; {}. Tokenize with that model's own tool (llm.c "
      "token files, data/token_file.h) or train a SentencePiece model here",
      json.string(), kSupported));
}

std::string read_model_file(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) {
    throw DataError(
        fmt::format("tokenizer '{}' cannot be read: {}; {}", file.string(), ec.message(),
                    kSupported));
  }
  if (int64_t(size) > kMaxTokenizerModelBytes) {
    throw DataError(fmt::format(
        "tokenizer '{}' has {} bytes, more than the {} a SentencePiece model may have here (the "
        "largest released ones have about 4 MB); it is not a tokenizer.model",
        file.string(), size, kMaxTokenizerModelBytes));
  }
  std::ifstream in(file, std::ios::binary);
  std::string bytes(size_t(size), '\0');
  if (!in.read(bytes.data(), std::streamsize(size))) {
    throw DataError(fmt::format("tokenizer '{}' cannot be read", file.string()));
  }
  return bytes;
}

// Reads a corpus file in blocks and hands out its lines (without '\n'), as spm_encode's getline.
class LineReader {
 public:
  explicit LineReader(const fs::path& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) {
      throw DataError(fmt::format("cannot open '{}' for reading (permissions?)", file.string()));
    }
  }
  // False at the end of the file.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == end_ && !eof_) refill();
      if (pos_ == end_) {  // the end of the file
        const bool had = pending_;
        pending_ = false;
        return had;
      }
      const char* start = buf_.data() + pos_;
      const void* nl = std::memchr(start, '\n', end_ - pos_);
      if (nl) {
        const size_t n = size_t(static_cast<const char*>(nl) - start);
        line.append(start, n);
        pos_ += n + 1;
        pending_ = false;
        return true;
      }
      line.append(start, end_ - pos_);
      pending_ = true;  // a last line without '\n' is still a line
      pos_ = end_;
    }
  }
  uint64_t bytes_read() const { return bytes_; }

 private:
  void refill() {
    in_.read(buf_.data(), std::streamsize(buf_.size()));
    end_ = size_t(in_.gcount());
    pos_ = 0;
    if (in_.bad()) throw DataError(fmt::format("error reading '{}'", file_.string()));
    if (end_ < buf_.size()) eof_ = true;
    if (const void* nul = std::memchr(buf_.data(), '\0', end_)) {
      throw DataError(fmt::format(
          "'{}' has a NUL byte at byte {}, so it is not text; pass a text file, or remove "
          "binary files from the corpus folder",
          file_.string(), bytes_ + uint64_t(static_cast<const char*>(nul) - buf_.data())));
    }
    bytes_ += end_;
  }

  fs::path file_;
  std::ifstream in_;
  std::vector<char> buf_ = std::vector<char>(size_t(1) << 20);
  size_t pos_ = 0, end_ = 0;
  uint64_t bytes_ = 0;
  bool eof_ = false, pending_ = false;
};

}  // namespace

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path model = path / "tokenizer.model";
    if (fs::exists(model, ec)) return load(model);
    if (fs::exists(path / "tokenizer.json", ec)) refuse_tokenizer_json(path / "tokenizer.json");
    throw DataError(fmt::format("folder '{}' has no tokenizer.model; {}", path.string(),
                                kSupported));
  }
  if (!fs::exists(path, ec)) {
    throw DataError(fmt::format("tokenizer '{}' does not exist; pass a tokenizer.model or a "
                                "folder holding one",
                                path.string()));
  }
  if (path.extension() == ".json") refuse_tokenizer_json(path);
  return from_bytes(read_model_file(path), path.string());
}

Tokenizer Tokenizer::from_bytes(std::string_view bytes, const std::string& source) {
  if (int64_t(bytes.size()) > kMaxTokenizerModelBytes) {
    throw DataError(fmt::format("tokenizer '{}' has {} bytes, more than the {} allowed", source,
                                bytes.size(), kMaxTokenizerModelBytes));
  }
  Tokenizer t;
  t.source_ = source;
  t.impl_ = std::make_unique<Impl>();
  const auto status = t.impl_->sp.LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw DataError(fmt::format("'{}' is not a valid SentencePiece model: {}; {}", source,
                                status.ToString(), kSupported));
  }
  if (t.impl_->sp.GetPieceSize() <= 0) {
    throw DataError(fmt::format("'{}' is a SentencePiece model without pieces", source));
  }
  return t;
}

const sentencepiece::SentencePieceProcessor& Tokenizer::processor() const {
  if (!impl_) throw std::logic_error("Tokenizer: no model (use Tokenizer::load or from_bytes)");
  return impl_->sp;
}

int Tokenizer::vocab_size() const {
  return processor().GetPieceSize();
}
int Tokenizer::bos_id() const {
  return processor().bos_id();
}
int Tokenizer::eos_id() const {
  return processor().eos_id();
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor().Encode(text, &ids);
  if (!status.ok()) {
    throw DataError(fmt::format("tokenizer '{}' cannot encode text: {}", source_,
                                status.ToString()));
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  const auto status = processor().Decode(ids, &text);
  if (!status.ok()) {
    throw DataError(fmt::format("tokenizer '{}' cannot decode ids: {}", source_,
                                status.ToString()));
  }
  return text;
}

BosMode parse_bos_mode(std::string_view name) {
  if (name == "line") return BosMode::line;
  if (name == "file") return BosMode::file;
  if (name == "none") return BosMode::none;
  throw std::invalid_argument(
      fmt::format("unknown BOS mode '{}'; choose line, file or none", name));
}

std::string_view bos_mode_name(BosMode mode) {
  switch (mode) {
    case BosMode::line:
      return "line";
    case BosMode::file:
      return "file";
    case BosMode::none:
      return "none";
  }
  return "?";
}

TokenizeResult tokenize_corpus(const Tokenizer& tokenizer, const fs::path& input,
                               const fs::path& output, const TokenizeOptions& options,
                               const TokenizeProgress& progress) {
  TokenizeResult r;
  r.inputs = text_corpus_files(input);
  r.vocab = tokenizer.vocab_size();
  const int bos = tokenizer.bos_id();
  if (options.bos != BosMode::none && bos < 0) {
    throw DataError(fmt::format(
        "tokenizer '{}' has no BOS piece (its bos_id is -1); tokenize without BOS (--bos none)",
        tokenizer.source()));
  }
  int64_t total = 0;
  for (const auto& f : r.inputs) {
    std::error_code ec;
    total += int64_t(fs::file_size(f, ec));
  }
  TokenFileWriter out(output, r.vocab);
  r.width = out.width();
  std::vector<uint32_t> pending;
  const size_t flush_at = size_t(1) << 20;
  int64_t done_before = 0, next_report = options.progress_every_bytes;
  std::string line;
  for (const auto& f : r.inputs) {
    LineReader reader(f);
    bool first_line = true;  // --bos file: before the file's first text (none for an empty file)
    while (reader.next(line)) {
      if (line.empty()) continue;
      const std::vector<int> ids = tokenizer.encode(line);
      if (options.bos == BosMode::line || (options.bos == BosMode::file && first_line)) {
        pending.push_back(uint32_t(bos));
      }
      first_line = false;
      pending.insert(pending.end(), ids.begin(), ids.end());
      ++r.lines;
      if (pending.size() >= flush_at) {
        out.append(pending);
        pending.clear();
      }
      const int64_t done = done_before + int64_t(reader.bytes_read());
      if (progress && options.progress_every_bytes > 0 && done >= next_report) {
        progress(done, total, out.count() + int64_t(pending.size()));
        next_report = done + options.progress_every_bytes;
      }
    }
    done_before += int64_t(reader.bytes_read());
  }
  out.append(pending);
  r.tokens = out.count();
  r.input_bytes = done_before;
  if (r.tokens == 0) {
    throw DataError(fmt::format("'{}' holds no text to tokenize (every line is empty)",
                                input.string()));
  }
  out.commit();
  if (progress) progress(r.input_bytes, total, r.tokens);
  return r;
}

SentencePieceType parse_sentencepiece_type(std::string_view name) {
  if (name == "bpe") return SentencePieceType::bpe;
  if (name == "unigram") return SentencePieceType::unigram;
  throw std::invalid_argument(
      fmt::format("unknown SentencePiece model type '{}'; choose bpe or unigram", name));
}

namespace {

// The corpus's lines for the trainer (the same reading as tokenize_corpus).
class CorpusSentences final : public sentencepiece::SentenceIterator {
 public:
  explicit CorpusSentences(std::vector<fs::path> files) : files_(std::move(files)) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    try {
      for (;;) {
        if (reader_ && reader_->next(line_)) return;
        if (index_ == files_.size()) {
          done_ = true;
          return;
        }
        reader_ = std::make_unique<LineReader>(files_[index_++]);
      }
    } catch (const DataError& e) {
      error_ = e.what();
      done_ = true;
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return {};
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error_);
  }

 private:
  std::vector<fs::path> files_;
  size_t index_ = 0;
  std::unique_ptr<LineReader> reader_;
  std::string line_, error_;
  bool done_ = false;
};

}  // namespace

void train_tokenizer(const fs::path& input, const fs::path& output_model,
                     const TokenizerTrainOptions& o) {
  if (o.vocab_size < 8) {
    throw std::invalid_argument(fmt::format("vocabulary size {} must be >= 8", o.vocab_size));
  }
  if (o.threads < 1) throw std::invalid_argument(fmt::format("threads {} must be >= 1", o.threads));
  if (o.max_sentences < 0) {
    throw std::invalid_argument(fmt::format("max_sentences {} must be >= 0", o.max_sentences));
  }
  CorpusSentences sentences(text_corpus_files(input));
  const std::unordered_map<std::string, std::string> args{
      {"model_type", o.model_type == SentencePieceType::bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"num_threads", std::to_string(o.threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"model_prefix", ""},
      // The library never prints (docs/architecture.md 6.11): the trainer's progress log is
      // INFO, its problems come back in the status.
      {"minloglevel", "2"},
  };
  // Process-wide in libsentencepiece (SetRandomGeneratorSeed): without it each run draws a seed.
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &model);
  if (!status.ok()) {
    throw DataError(fmt::format("training a SentencePiece model on '{}' failed: {}",
                                input.string(), status.ToString()));
  }
  if (model.empty()) {
    throw DataError(fmt::format("training a SentencePiece model on '{}' gave no model",
                                input.string()));
  }
  std::error_code ec;
  const fs::path dir = output_model.parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  const fs::path tmp = output_model.string() + ".tmp-mixp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr;
  if (f) {
    ok = std::fwrite(model.data(), 1, model.size(), f) == model.size();
    ok = (std::fclose(f) == 0) && ok;
  }
  if (ok) fs::rename(tmp, output_model, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    throw DataError(fmt::format("cannot write tokenizer '{}'", output_model.string()));
  }
}

}  // namespace mixp::data
