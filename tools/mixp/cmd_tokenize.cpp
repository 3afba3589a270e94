// `mixp tokenize`: text to an llm.c token file with a SentencePiece model, or (--train) a
// SentencePiece model from text. The work is data::tokenize_corpus and data::train_tokenizer
// (include/mixp/data/tokenizer.h); both write atomically, so a failure leaves no output file.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "flag_range.h"
#include "mixp/data/tokenizer.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct TokenizeArgs {
  std::string input, output, tokenizer, bos = "line", model_type = "unigram";
  bool train = false, json = false, byte_fallback = false;
  int64_t vocab_size = 0, max_sentences = 0;
  int threads = 16;
  uint64_t seed = 0;
};

std::string width_name(data::TokenWidth w) {
  return w == data::TokenWidth::u16 ? "uint16" : "uint32";
}

// One line on stderr redrawn in place, only when stderr is a terminal (as `mixp train`'s bar).
void draw_progress(int64_t done, int64_t total, int64_t tokens) {
  if (!stderr_is_tty()) return;
  const double pct = total > 0 ? 100.0 * double(done) / double(total) : 100.0;
  std::cerr << fmt::format("\rtokenize: {:5.1f}% ({:.1f} of {:.1f} MB), {} tokens", pct,
                           double(done) / 1e6, double(total) / 1e6, tokens)
            << std::flush;
}

void run_tokenize(const TokenizeArgs& a) {
  if (a.tokenizer.empty()) {
    throw UsageError("--tokenizer DIR|FILE is required (a tokenizer.model, or a folder holding "
                     "one); or --train to make a SentencePiece model");
  }
  data::TokenizeOptions opt;
  try {
    opt.bos = data::parse_bos_mode(a.bos);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const data::Tokenizer tok = data::Tokenizer::load(a.tokenizer);
  const data::TokenizeResult r = data::tokenize_corpus(tok, a.input, a.output, opt, draw_progress);
  if (stderr_is_tty()) std::cerr << "\n";
  if (a.json) {
    print_json({{"input", a.input},
                {"output", a.output},
                {"tokenizer", tok.source()},
                {"tokens", r.tokens},
                {"vocab", r.vocab},
                {"token_dtype", width_name(r.width)},
                {"bos", std::string(data::bos_mode_name(opt.bos))},
                {"bos_id", tok.bos_id()},
                {"lines", r.lines},
                {"input_bytes", r.input_bytes},
                {"files", r.inputs.size()}});
    return;
  }
  std::cout << fmt::format(
      "tokenized {} ({} bytes, {} lines in {} file{}) with {} (vocabulary {})\nwrote {}: {} "
      "tokens, {} ids, BOS per {}\n",
      a.input, r.input_bytes, r.lines, r.inputs.size(), r.inputs.size() == 1 ? "" : "s",
      tok.source(), r.vocab, a.output, r.tokens, width_name(r.width), data::bos_mode_name(opt.bos));
}

void run_train(const TokenizeArgs& a) {
  if (!a.tokenizer.empty()) {
    throw UsageError("--train makes a tokenizer; --tokenizer names one to use: pass one of them");
  }
  if (a.vocab_size == 0) throw UsageError("--train needs --vocab-size N");
  data::TokenizerTrainOptions opt;
  try {
    opt.model_type = data::parse_sentencepiece_type(a.model_type);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  opt.vocab_size = int(a.vocab_size);
  opt.seed = uint32_t(a.seed);
  opt.threads = a.threads;
  opt.max_sentences = a.max_sentences;
  opt.byte_fallback = a.byte_fallback;
  data::train_tokenizer(a.input, a.output, opt);
  const data::Tokenizer tok = data::Tokenizer::load(a.output);
  if (a.json) {
    print_json({{"input", a.input},
                {"output", a.output},
                {"model_type", a.model_type},
                {"vocab", tok.vocab_size()},
                {"seed", a.seed},
                {"threads", a.threads},
                {"max_sentences", a.max_sentences},
                {"byte_fallback", a.byte_fallback},
                {"bos_id", tok.bos_id()},
                {"eos_id", tok.eos_id()}});
    return;
  }
  std::cout << fmt::format("trained a {} SentencePiece model of {} pieces on {}\nwrote {}\n",
                           a.model_type, tok.vocab_size(), a.input, a.output);
}

RegisterCommand reg(25, [](CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* sub = app.add_subcommand(
      "tokenize", "text to an llm.c token file with a SentencePiece model, or train one");
  sub->add_option("input", a->input, "the text: a file, or a folder of text files")->required();
  sub->add_option("-o,--output", a->output,
                  "the token file to write (.bin), or with --train the model (tokenizer.model); "
                  "written atomically")
      ->required();
  sub->add_option("--tokenizer", a->tokenizer,
                  "a SentencePiece tokenizer.model, or a folder holding one (Llama-2, TinyLlama, "
                  "Mistral checkpoints)");
  auto* bos = sub->add_option("--bos", a->bos,
                  "where BOS goes: line (before each non-empty line; default), file (once per "
                  "input file), none");
  sub->add_flag("--train", a->train, "train a SentencePiece model on the text instead");
  auto* vocab = sub->add_option("--vocab-size", a->vocab_size, "--train: pieces in the model");
  auto* type = sub->add_option("--model-type", a->model_type, "--train: unigram (default) or bpe");
  auto* seed = sub->add_option("--seed", a->seed,
                               "--train: seed of SentencePiece's random generator (default 0)");
  auto* threads = sub->add_option(
      "--threads", a->threads,
      "--train: trainer threads (default 16, SentencePiece's; the model depends on it)");
  auto* sentences = sub->add_option(
      "--max-sentences", a->max_sentences,
      "--train: sample this many lines of the text, seeded (default 0: all of them)");
  auto* fallback = sub->add_flag("--byte-fallback", a->byte_fallback,
                "--train: unknown characters become UTF-8 byte pieces (as Llama-2's model)");
  sub->add_flag("--json", a->json, "print one JSON object on stdout");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  int_range(vocab, 8, 1 << 24);
  uint_range(seed, UINT32_MAX);
  int_range(threads, 1, 1024);
  int_range(sentences, 0, INT64_MAX);
  sub->footer(
      "Tokenizing reads the text line by line (as spm_encode): each non-empty line is encoded\n"
      "without its newline, so the ids equal `spm_encode --output_format=id`, plus BOS (--bos).\n"
      "The output is an llm.c token file: uint16 ids (magic 20240520, version 1) when the\n"
      "vocabulary has at most 65536 pieces, else uint32 (llm.c's 20240801, version 7); header[3]\n"
      "holds the vocabulary, which `mixp train --data FILE.bin` gives the model (docs/data.md).\n"
      "Hugging Face tokenizer.json files (BPE fast tokenizers) are not read.\n\n"
      "Examples:\n"
      "  mixp tokenize corpus.txt --tokenizer TinyLlama-1.1B/ -o tokens.bin\n"
      "  mixp tokenize /usr/share/games/fortunes --tokenizer tok/tokenizer.model -o f.bin --json\n"
      "  mixp tokenize --train corpus.txt --vocab-size 8000 --model-type bpe -o tok/tokenizer.model\n"
      "  mixp train --model gpt --data tokens.bin --steps 100\n");
  sub->callback([a, bos, vocab, type, seed, threads, sentences, fallback] {
    if (a->train) {
      if (bos->count() > 0) throw UsageError("--bos applies to tokenizing, not to --train");
      return run_train(*a);
    }
    for (const CLI::Option* o : {vocab, type, seed, threads, sentences, fallback}) {
      if (o->count() > 0) {
        throw UsageError(o->get_name() + " applies to --train (making a SentencePiece model)");
      }
    }
    run_tokenize(*a);
  });
});

}  // namespace
}  // namespace mixp::cli
