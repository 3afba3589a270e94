// Text to tokens with SentencePiece models (`tokenizer.model`: Llama-2, TinyLlama, Mistral, or one
// trained here), through Debian's libsentencepiece (0.1.97). `mixp tokenize` is the CLI over it
// (docs/data.md, "Tokenizing text").
//
// Loading: a tokenizer.model is untrusted input (people download checkpoints). It is read whole
// (at most kMaxTokenizerModelBytes) and parsed by the library's own protobuf and model checks
// (SentencePieceProcessor::LoadFromSerializedProto); whatever they refuse is a DataError naming
// the file. Hugging Face's `tokenizer.json` (fast tokenizers: byte-level BPE as GPT-2, Llama-3,
// Qwen2 use) is not read: a folder that holds only that is an error saying what is supported.
//
// Encoding is line by line, as spm_encode and Hugging Face's "text" datasets do: each line
// without its '\n' is one piece of text, so the ids equal `spm_encode --output_format=id` on the
// same file. An empty line gives no ids. BOS (BosMode) goes before each non-empty line (default,
// as Hugging Face's Llama tokenizer adds one per text it encodes and llm.c one per document),
// before the first text of each input file, or nowhere.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/data/token_file.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mixp::data {

// A tokenizer.model larger than this is refused before it is read (Llama-2's is 0.5 MB, the
// largest SentencePiece models released, with 256k pieces, about 4 MB).
inline constexpr int64_t kMaxTokenizerModelBytes = int64_t(64) << 20;

class Tokenizer {
 public:
  // `path`: a SentencePiece model file, or a folder holding `tokenizer.model` (a Hugging Face
  // checkpoint folder). Throws DataError: missing, too large, not a SentencePiece model (the
  // library's message), or a folder with only tokenizer.json.
  static Tokenizer load(const std::filesystem::path& path);
  // The same checks on a model's bytes; `source` names it in errors.
  static Tokenizer from_bytes(std::string_view bytes, const std::string& source);

  Tokenizer();  // no model: every call but assignment throws std::logic_error
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const std::string& source() const { return source_; }
  int vocab_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;  // -1 when the model has none
  // One line's ids, without BOS or EOS. Throws DataError when the library fails.
  std::vector<int> encode(std::string_view text) const;
  std::string decode(const std::vector<int>& ids) const;

 private:
  const sentencepiece::SentencePieceProcessor& processor() const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string source_;
};

enum class BosMode { line, file, none };
// "line", "file", "none"; throws std::invalid_argument naming the choices.
BosMode parse_bos_mode(std::string_view name);
std::string_view bos_mode_name(BosMode mode);

struct TokenizeOptions {
  BosMode bos = BosMode::line;
  int64_t progress_every_bytes = int64_t(16) << 20;  // how often `progress` is called
};

struct TokenizeResult {
  int64_t tokens = 0;      // written, BOS included
  int64_t lines = 0;       // non-empty lines encoded
  int64_t input_bytes = 0;
  int vocab = 0;
  TokenWidth width = TokenWidth::u16;
  std::vector<std::filesystem::path> inputs;  // the files read, in order
};

// Called every progress_every_bytes of input and once at the end.
using TokenizeProgress = std::function<void(int64_t bytes_done, int64_t bytes_total,
                                            int64_t tokens)>;

// Tokenizes the text corpus `input` (a file, or a folder read as text_corpus_files does) into the
// llm.c token file `output` (token_file.h: uint16 when the vocabulary fits, else uint32), streamed:
// the input is read in blocks, never whole. Atomic: an error leaves no output file. Throws
// DataError (a missing input, a NUL byte: binary, no tokens at all, a write error).
TokenizeResult tokenize_corpus(const Tokenizer& tokenizer, const std::filesystem::path& input,
                               const std::filesystem::path& output,
                               const TokenizeOptions& options = {},
                               const TokenizeProgress& progress = {});

enum class SentencePieceType { bpe, unigram };
SentencePieceType parse_sentencepiece_type(std::string_view name);  // "bpe" or "unigram"

struct TokenizerTrainOptions {
  int vocab_size = 8000;
  SentencePieceType model_type = SentencePieceType::unigram;  // SentencePiece's default
  // Seeds SentencePiece's random generator (its sampling of sentences with max_sentences).
  uint32_t seed = 0;
  // SentencePiece's num_threads (its default, 16). The model depends on it: the same input,
  // options, seed and thread count give the same bytes; another thread count another model.
  int threads = 16;
  // Sentences (lines) sampled from the input, 0 for all (SentencePiece's input_sentence_size).
  int64_t max_sentences = 0;
  bool byte_fallback = false;  // unknown characters as UTF-8 byte pieces (Llama-2's choice)
};

// Trains a SentencePiece model on the lines of `input` (file or folder, as tokenize_corpus reads
// them) with libsentencepiece's trainer and writes it to `output_model` atomically (no .vocab file).
// Throws DataError with the library's message (e.g. a vocabulary too large for the text).
void train_tokenizer(const std::filesystem::path& input, const std::filesystem::path& output_model,
                     const TokenizerTrainOptions& options);

}  // namespace mixp::data
