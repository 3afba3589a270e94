#include "batch_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "mixp/data/batch_sampler.h"
#include "mixp/data/image_dataset.h"
#include "mixp/data/random.h"
#include "mixp/data/text_corpus.h"
#include "mixp/data/token_file.h"
#include "mixp/io/manifest.h"
#include "mixp/tensor/factories.h"

namespace mixp::train::detail {

namespace {

// Batches are loaded into host (cpu) buffers and handed to the model on the default device
// (tensor/device.h): the explicit host-to-device path; on the cpu the buffers themselves.
void to_model_device(Batch& b) {
  const Device d = default_device();
  b.input = b.input.to(d);
  b.target = b.target.to(d);
}

// CRC-32 of the elements of `v` (io/manifest.h), as 8 hex digits.
template <class T>
std::string crc_hex(std::span<const T> v) {
  return fmt::format("{:08x}", crc32_of(std::as_bytes(v)));
}
// A token file's ids, uint16 or uint32 (the file's bytes, so a uint16 file keeps its fingerprint).
std::string crc_hex(const data::TokenSpan& v) {
  return fmt::format("{:08x}", crc32_of(v.bytes()));
}

// Evaluation runs without gradients, so a larger batch only costs activation memory; 1000 keeps
// the test set in ten GEMM-friendly batches.
constexpr int64_t kEvalBatch = 1000;
// Size of the generated data sets of `data = synthetic` when no limit is given.
constexpr int64_t kSyntheticTrain = 6000;
constexpr int64_t kSyntheticTest = 1000;
constexpr int64_t kSyntheticCorpusBytes = 200000;

class ImageBatches final : public DataSource {
 public:
  ImageBatches(const TrainConfig& c, bool load_train) : cnn_(c.model.name == "cnn") {
    data::ImageLoadOptions opt;
    opt.normalize = true;  // the peers use Normalize((0.2860,), (0.3530,)) too (docs/data.md)
    if (c.data == kSyntheticData) {
      // One generated set split in two, so that train and test share the class prototypes.
      const int64_t ntr = c.train_limit > 0 ? c.train_limit : kSyntheticTrain;
      const int64_t nte = c.test_limit > 0 ? c.test_limit : kSyntheticTest;
      data::ImageDataset all = data::synthetic_images(ntr + nte, 28, 28, 10, c.seed);
      train_ = slice(all, 0, ntr);
      test_ = slice(all, ntr, ntr + nte);
      source_ = "synthetic images";
    } else {
      const std::filesystem::path dir = c.data == kFashionMnistData
                                            ? std::filesystem::path(data::kFashionMnistDir)
                                            : std::filesystem::path(c.data);
      opt.limit = c.test_limit;
      test_ = data::load_fashion_mnist(dir, data::Split::test, opt);
      if (load_train) {
        opt.limit = c.train_limit;
        train_ = data::load_fashion_mnist(dir, data::Split::train, opt);
        // Found now, not after every step ran (the evaluation would fail at the end).
        if (test_.rows != train_.rows || test_.cols != train_.cols) {
          throw TrainError("the test images in " + dir.string() + " are " +
                           std::to_string(test_.rows) + "x" + std::to_string(test_.cols) +
                           " pixels but the training images are " + std::to_string(train_.rows) +
                           "x" + std::to_string(train_.cols) +
                           "; the test set does not belong to the training set");
        }
      }
      source_ = dir.string();
    }
    batch_ = c.batch;
    if (load_train) {
      sampler_ = std::make_unique<data::BatchSampler>(train_.count, batch_, c.seed);
      x_ = empty({batch_, train_.sample_size()}, {.device = Device::cpu()});
      y_ = empty({batch_}, {.dtype = DType::int32, .device = Device::cpu()});
    }
    eval_batch_ = std::min<int64_t>(kEvalBatch, std::max<int64_t>(test_.count, 1));
    ex_ = empty({eval_batch_, test_.sample_size()}, {.device = Device::cpu()});
    ey_ = empty({eval_batch_}, {.dtype = DType::int32, .device = Device::cpu()});
  }

  int64_t batches_per_epoch() const override { return sampler_->batches_per_epoch(); }
  int64_t batch_size() const override { return batch_; }
  int64_t epoch() const override {
    // The sampler moves to the next epoch lazily (on the next call); report that epoch already.
    return sampler_->at_epoch_end() ? sampler_->epoch() + 1 : sampler_->epoch();
  }
  int64_t position() const override {
    if (sampler_->at_epoch_end()) return 0;
    return (sampler_->position() + batch_ - 1) / batch_;
  }

  Batch next() override {
    const auto idx = sampler_->next();
    return gather(train_, idx, x_, y_);
  }

  std::string state() const override {
    const data::SamplerState s = sampler_->state();
    return nlohmann::json{{"seed", s.seed},
                          {"epoch", s.epoch},
                          {"position", s.position},
                          {"dataset_size", s.dataset_size},
                          {"batch_size", s.batch_size}}
        .dump();
  }
  void restore(const std::string& text) override {
    const nlohmann::json j = nlohmann::json::parse(text);
    data::SamplerState s;
    s.seed = j.at("seed").get<uint64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.position = j.at("position").get<int64_t>();
    s.dataset_size = j.at("dataset_size").get<int64_t>();
    s.batch_size = j.at("batch_size").get<int64_t>();
    try {
      sampler_->restore(s);
    } catch (const std::invalid_argument& e) {
      throw TrainError(std::string("the checkpoint's data order does not fit this run: ") +
                       e.what() +
                       " (a resumed run continues the checkpoint's data order, so --data must "
                       "name the data set it was trained on; it may have moved, but not changed)");
    }
  }

  int64_t eval_batches() const override { return (test_.count + eval_batch_ - 1) / eval_batch_; }
  Batch eval_batch(int64_t index) override {
    const int64_t begin = index * eval_batch_;
    const int64_t n = std::min(eval_batch_, test_.count - begin);
    eval_idx_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) eval_idx_[size_t(i)] = begin + i;
    return gather(test_, eval_idx_, ex_, ey_);
  }
  int64_t eval_samples() const override { return test_.count; }
  int64_t train_samples() const override { return train_.count; }
  std::string fingerprint() const override {
    if (!sampler_) return {};  // the training set was not loaded (evaluation)
    if (fingerprint_.empty()) {
      fingerprint_ = "crc32:" + crc_hex(std::span<const float>(train_.images)) + "-" +
                     crc_hex(std::span<const int32_t>(train_.labels));
    }
    return fingerprint_;
  }
  std::string description() const override {
    return source_ + ": " + std::to_string(train_.count) + " training / " +
           std::to_string(test_.count) + " test images";
  }

 private:
  mutable std::string fingerprint_;  // computed on first use
  static data::ImageDataset slice(const data::ImageDataset& all, int64_t b, int64_t e) {
    data::ImageDataset d;
    d.count = e - b;
    d.rows = all.rows;
    d.cols = all.cols;
    d.num_classes = all.num_classes;
    d.images.assign(all.images.begin() + b * all.sample_size(),
                    all.images.begin() + e * all.sample_size());
    d.labels.assign(all.labels.begin() + b, all.labels.begin() + e);
    return d;
  }

  // Copies the samples into the long-lived buffers and returns views of the first n rows (the
  // last batch of an epoch may be short).
  Batch gather(const data::ImageDataset& ds, std::span<const int64_t> idx, const Tensor& x,
               const Tensor& y) {
    const int64_t n = int64_t(idx.size());
    data::gather_batch(ds, idx, {x.data<float>(), size_t(x.numel())},
                       {y.data<int32_t>(), size_t(y.numel())});
    Batch b;
    b.samples = n;
    b.input = x.slice(0, 0, n);
    if (cnn_) b.input = b.input.view({n, 1, ds.rows, ds.cols});
    b.target = y.slice(0, 0, n);
    to_model_device(b);
    return b;
  }

  bool cnn_;
  int64_t batch_ = 0, eval_batch_ = 0;
  std::string source_;
  data::ImageDataset train_, test_;
  std::unique_ptr<data::BatchSampler> sampler_;
  Tensor x_, y_, ex_, ey_;
  std::vector<int64_t> eval_idx_;
};

data::TextCorpus load_text_corpus(const TrainConfig& c) {
  if (c.data == kSyntheticData) {
    const int64_t n = c.train_limit > 0 ? c.train_limit : kSyntheticCorpusBytes;
    return data::TextCorpus::from_text(data::synthetic_corpus(n, c.seed), {}, "synthetic corpus");
  }
  data::TextCorpus corpus = data::TextCorpus::load(c.data);
  if (c.train_limit > 0 && c.train_limit < corpus.size()) {
    // Keep the first N tokens (train and validation are then split from those).
    const std::string text = corpus.decode(corpus.tokens().subspan(0, size_t(c.train_limit)));
    corpus = data::TextCorpus::from_text(
        text, {}, corpus.source() + " (first " + std::to_string(c.train_limit) + " bytes)");
  }
  return corpus;
}

// Batches of a byte corpus (data::TextCorpus) or of an llm.c token file (data::TokenCorpus): the
// same sampling, so the same seed gives the same windows of either.
template <class Corpus>
class TextBatches final : public DataSource {
 public:
  TextBatches(const TrainConfig& c, int64_t context, Corpus corpus)
      : context_(context), batch_(c.batch), seed_(c.seed), corpus_(std::move(corpus)) {
    corpus_.require_context(context_);
    per_epoch_ = std::max<int64_t>(1, int64_t(corpus_.train_tokens().size()) / (batch_ * context_));
    eval_windows_ = corpus_.num_val_windows(context_);
    if (c.test_limit > 0) eval_windows_ = std::min(eval_windows_, c.test_limit);
    x_ = empty({batch_, context_}, {.dtype = DType::int32, .device = Device::cpu()});
    y_ = empty({batch_ * context_}, {.dtype = DType::int32, .device = Device::cpu()});
  }

  int64_t batches_per_epoch() const override { return per_epoch_; }
  int64_t batch_size() const override { return batch_; }
  int64_t epoch() const override { return micro_ / per_epoch_; }
  int64_t position() const override { return micro_ % per_epoch_; }

  Batch next() override {
    // Exactly sample_batch_at(seed, micro_), without its allocations.
    std::mt19937_64 rng(data::derive_seed(seed_, uint64_t(micro_)));
    corpus_.sample_batch(rng, batch_, context_, {x_.data<int32_t>(), size_t(x_.numel())},
                         {y_.data<int32_t>(), size_t(y_.numel())});
    ++micro_;
    Batch b{x_, y_, batch_};
    to_model_device(b);
    return b;
  }

  std::string state() const override {
    return nlohmann::json{{"seed", seed_},
                          {"micro_batch", micro_},
                          {"train_tokens", corpus_.train_tokens().size()},
                          {"batch_size", batch_},
                          {"context", context_}}
        .dump();
  }
  void restore(const std::string& text) override {
    const nlohmann::json j = nlohmann::json::parse(text);
    const auto tokens = j.at("train_tokens").get<int64_t>();
    const auto batch = j.at("batch_size").get<int64_t>();
    const auto context = j.at("context").get<int64_t>();
    if (tokens != int64_t(corpus_.train_tokens().size()) || batch != batch_ ||
        context != context_) {
      throw TrainError("the checkpoint was trained on " + std::to_string(tokens) +
                       " training tokens with batch " + std::to_string(batch) + " and context " +
                       std::to_string(context) + ", this run has " +
                       std::to_string(corpus_.train_tokens().size()) + ", " +
                       std::to_string(batch_) + " and " + std::to_string(context_) +
                       "; a resumed run continues the checkpoint's data order, so --data must "
                       "name the corpus it was trained on (it may have moved, but not changed)");
    }
    seed_ = j.at("seed").get<uint64_t>();
    micro_ = j.at("micro_batch").get<int64_t>();
  }

  int64_t eval_batches() const override { return (eval_windows_ + batch_ - 1) / batch_; }
  Batch eval_batch(int64_t index) override {
    int64_t n = corpus_.val_batch(index, batch_, context_, {x_.data<int32_t>(), size_t(x_.numel())},
                                  {y_.data<int32_t>(), size_t(y_.numel())});
    n = std::min(n, eval_windows_ - index * batch_);  // the test limit may cut a batch short
    Batch b{x_.slice(0, 0, n), y_.slice(0, 0, n * context_), n};
    to_model_device(b);
    return b;
  }
  int64_t eval_samples() const override { return eval_windows_; }
  int64_t train_samples() const override { return int64_t(corpus_.train_tokens().size()); }
  std::string fingerprint() const override {
    if (fingerprint_.empty()) fingerprint_ = "crc32:" + crc_hex(corpus_.train_tokens());
    return fingerprint_;
  }
  int vocab_size() const override { return corpus_.vocab_size(); }
  std::string description() const override {
    return corpus_.source() + ": " + std::to_string(corpus_.size()) + " tokens, vocabulary " +
           std::to_string(corpus_.vocab_size()) + ", " + std::to_string(eval_windows_) +
           " validation windows";
  }

 private:
  int64_t context_, batch_;
  uint64_t seed_;
  Corpus corpus_;
  mutable std::string fingerprint_;  // computed on first use
  int64_t per_epoch_ = 1, eval_windows_ = 0, micro_ = 0;
  Tensor x_, y_;
};

}  // namespace

std::unique_ptr<DataSource> make_batch_source(const TrainConfig& c, int64_t context, bool train) {
  if (is_language_model(c.model.name)) {
    if (c.data != kSyntheticData &&
        (data::is_token_file(c.data) || std::filesystem::path(c.data).extension() == ".bin")) {
      if (c.train_limit > 0) {
        throw ConfigError("--train-limit cuts a text corpus; for a token file '" + c.data +
                          "' write a shorter file instead");
      }
      return std::make_unique<TextBatches<data::TokenCorpus>>(c, context,
                                                              data::TokenCorpus::load(c.data));
    }
    return std::make_unique<TextBatches<data::TextCorpus>>(c, context, load_text_corpus(c));
  }
  return std::make_unique<ImageBatches>(c, train);
}

}  // namespace mixp::train::detail
