// Labelled image classification sets stored as IDX pairs: Fashion-MNIST from Debian's package
// `dataset-fashion-mnist` by default, or any folder with the same file names (MNIST included).
//
// Pixel values (matching the PyTorch peer scripts bit for bit, in float32):
//   ubyte images:  x = float(byte) / 255.0f                (torchvision ToTensor)
//   normalize:     x = (x - mean) / std                    (torchvision Normalize((mean,), (std,)))
// with Fashion-MNIST's mean 0.2860 and std 0.3530 (the training set's pixel statistics, rounded to
// 4 digits as commonly published). float32 IDX images (type 0x0D) are taken as they are.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// The ten Fashion-MNIST classes, by label ("T-shirt/top", "Trouser", ..., "Ankle boot").
std::span<const std::string_view> fashion_mnist_class_names();

struct ImageDataset {
  int64_t count = 0;  // number of samples
  int64_t rows = 0;
  int64_t cols = 0;
  int num_classes = 0;
  std::vector<float> images;    // count * rows * cols, row-major, sample-major
  std::vector<int32_t> labels;  // count, each in [0, num_classes)

  int64_t sample_size() const { return rows * cols; }
  std::span<const float> image(int64_t i) const {
    return {images.data() + i * sample_size(), static_cast<size_t>(sample_size())};
  }
};

enum class Split { train, test };

struct ImageLoadOptions {
  int64_t limit = 0;       // keep only the first `limit` samples (0 = all; more than present = all)
  bool normalize = false;  // apply (x - mean) / stddev after scaling to [0, 1]
  float mean = kFashionMnistMean;
  float stddev = kFashionMnistStd;
  int num_classes = 10;  // labels must lie in [0, num_classes); 0 = infer as max label + 1
};

// Loads one images/labels IDX pair (plain or .gz). Checks: images are 3-D ubyte (magic 0x00000803)
// or float32 (0x00000D03), labels 1-D ubyte (0x00000801), equal counts, labels in range, pixels
// finite (float files; also after normalization).
ImageDataset load_idx_dataset(const std::filesystem::path& images_file,
                              const std::filesystem::path& labels_file,
                              const ImageLoadOptions& options = {});

// The images and labels files of `split` in `dir`. Accepted names, first found wins, for prefix
// "train" (Split::train) or "t10k" (Split::test):
//   {prefix}-images-idx3-ubyte.gz  {prefix}-images-idx3-ubyte     (Fashion-MNIST / MNIST)
//   {prefix}-images.idx3-ubyte.gz  {prefix}-images.idx3-ubyte     (MNIST as some mirrors name it)
// and the same with labels/idx1. A missing folder or file throws DataError naming the names tried
// and `apt-get install dataset-fashion-mnist`.
struct IdxPair {
  std::filesystem::path images;
  std::filesystem::path labels;
};
IdxPair find_idx_pair(const std::filesystem::path& dir, Split split);

// find_idx_pair + load_idx_dataset. `dir` defaults to Debian's Fashion-MNIST folder.
ImageDataset load_fashion_mnist(const std::filesystem::path& dir = kFashionMnistDir,
                                Split split = Split::train, const ImageLoadOptions& options = {});

// A learnable stand-in for tests and demos without the package: each class has a fixed random
// prototype image in [0, 1]; a sample is its class prototype plus uniform noise of +-noise,
// clamped to [0, 1]. Labels are drawn uniformly; everything is a function of `seed`.
ImageDataset synthetic_images(int64_t count, int64_t rows, int64_t cols, int num_classes,
                              uint64_t seed, float noise = 0.25f);

}  // namespace mixp::data
