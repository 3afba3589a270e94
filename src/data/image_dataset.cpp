// IDX image/label pairs -> ImageDataset. The pixel formula is fixed (see image_dataset.h) because
// the PyTorch peer scripts must see bit-identical inputs for like-for-like comparisons.
#include "mixp/data/image_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "mixp/data/check_finite.h"
#include "mixp/data/error.h"
#include "mixp/data/idx.h"
#include "mixp/data/random.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {

constexpr std::array<std::string_view, 10> kClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::vector<std::string> candidate_names(Split split, bool images) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string kind = images ? "images" : "labels";
  const std::string idx = images ? "idx3-ubyte" : "idx1-ubyte";
  return {prefix + "-" + kind + "-" + idx + ".gz", prefix + "-" + kind + "-" + idx,
          prefix + "-" + kind + "." + idx + ".gz", prefix + "-" + kind + "." + idx};
}

std::string install_hint() {
  return fmt::format(
      "Fashion-MNIST comes from Debian's package: `apt-get install {}` (installs {}); for another "
      "IDX data set pass --data DIR",
      kFashionMnistPackage, kFashionMnistDir);
}

float be_float(const uint8_t* p) {
  const uint32_t u =
      (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
  return std::bit_cast<float>(u);
}

}  // namespace

std::span<const std::string_view> fashion_mnist_class_names() {
  return kClassNames;
}

IdxPair find_idx_pair(const fs::path& dir, Split split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError(fmt::format("data folder '{}' {}; {}", dir.string(),
                                fs::exists(dir, ec) ? "is not a folder" : "does not exist",
                                install_hint()));
  }
  IdxPair pair;
  for (bool images : {true, false}) {
    const auto names = candidate_names(split, images);
    fs::path found;
    for (const auto& n : names) {
      if (fs::is_regular_file(dir / n, ec)) {
        found = dir / n;
        break;
      }
    }
    if (found.empty()) {
      throw DataError(fmt::format("data folder '{}' has no {} {} file: looked for {}; {}",
                                  dir.string(), split == Split::train ? "training" : "test",
                                  images ? "images" : "labels", fmt::join(names, ", "),
                                  install_hint()));
    }
    (images ? pair.images : pair.labels) = found;
  }
  return pair;
}

ImageDataset load_idx_dataset(const fs::path& images_file, const fs::path& labels_file,
                              const ImageLoadOptions& opt) {
  if (opt.limit < 0) throw std::invalid_argument(fmt::format("limit {} < 0", opt.limit));
  if (opt.num_classes < 0 || opt.num_classes > 65536) {
    throw std::invalid_argument(fmt::format("num_classes {} outside [0, 65536]", opt.num_classes));
  }
  if (opt.normalize && !(std::isfinite(opt.mean) && std::isfinite(opt.stddev) && opt.stddev > 0)) {
    throw std::invalid_argument(
        fmt::format("normalization needs a finite mean and a finite std > 0, got mean {} std {}",
                    opt.mean, opt.stddev));
  }
  const std::string iname = fmt::format("'{}'", images_file.string());
  const std::string lname = fmt::format("'{}'", labels_file.string());

  IdxArray img = read_idx(images_file);
  if (img.dims.size() != 3 || (img.type != IdxType::u8 && img.type != IdxType::f32)) {
    throw DataError(fmt::format(
        "{}: IDX magic 0x{:08X} is not an image file (expected 0x00000803: ubyte, 3 dimensions "
        "count x rows x cols; or 0x00000D03 for float32); were images and labels swapped?",
        iname, img.magic()));
  }
  IdxArray lab = read_idx(labels_file);
  if (lab.dims.size() != 1 || lab.type != IdxType::u8) {
    throw DataError(fmt::format(
        "{}: IDX magic 0x{:08X} is not a label file (expected 0x00000801: ubyte, 1 dimension); "
        "were images and labels swapped?",
        lname, lab.magic()));
  }
  if (img.dims[0] != lab.dims[0]) {
    throw DataError(
        fmt::format("{} holds {} images but {} holds {} labels; the two files must "
                    "come from the same data set and split",
                    iname, img.dims[0], lname, lab.dims[0]));
  }
  if (img.dims[1] == 0 || img.dims[2] == 0) {
    throw DataError(fmt::format("{}: images of {}x{} pixels; need at least 1x1", iname, img.dims[1],
                                img.dims[2]));
  }

  ImageDataset ds;
  ds.count = opt.limit > 0 ? std::min(opt.limit, img.dims[0]) : img.dims[0];
  ds.rows = img.dims[1];
  ds.cols = img.dims[2];
  if (ds.count == 0) throw DataError(fmt::format("{} holds no samples", iname));

  // Labels first: validating them is cheap and a bad label file should not cost a full decode.
  const std::span<const uint8_t> lp = lab.payload();
  ds.labels.resize(static_cast<size_t>(ds.count));
  int max_label = 0;
  for (int64_t i = 0; i < ds.count; ++i) {
    const int v = lp[static_cast<size_t>(i)];
    if (opt.num_classes > 0 && v >= opt.num_classes) {
      throw DataError(fmt::format(
          "{}: label {} of record {} (byte {}) is outside [0, {}); the file is corrupt or the data "
          "set has more classes (set num_classes)",
          lname, v, i, lab.payload_offset + size_t(i), opt.num_classes));
    }
    max_label = std::max(max_label, v);
    ds.labels[static_cast<size_t>(i)] = v;
  }
  ds.num_classes = opt.num_classes > 0 ? opt.num_classes : max_label + 1;

  const size_t n = static_cast<size_t>(ds.count * ds.sample_size());
  ds.images.resize(n);
  const uint8_t* src = img.payload().data();
  if (img.type == IdxType::u8) {
    // Exactly torchvision's order of operations in float32: x / 255, then (x - mean) / std.
    for (size_t i = 0; i < n; ++i) ds.images[i] = float(src[i]) / 255.0f;
  } else {
    for (size_t i = 0; i < n; ++i) ds.images[i] = be_float(src + 4 * i);
    const int64_t bad = find_nonfinite(ds.images);
    if (bad >= 0) {
      throw DataError(fmt::format(
          "{}: pixel value {} at sample {}, row {}, col {} (byte {}) is not finite; NaN or "
          "infinite inputs would poison training, fix or drop that sample",
          iname, ds.images[size_t(bad)], bad / ds.sample_size(), bad % ds.sample_size() / ds.cols,
          bad % ds.cols, img.payload_offset + 4 * size_t(bad)));
    }
  }
  if (opt.normalize) {
    const float mean = opt.mean, stdev = opt.stddev;
    for (size_t i = 0; i < n; ++i) ds.images[i] = (ds.images[i] - mean) / stdev;
    check_finite(ds.images, fmt::format("{} after normalization", iname));
  }
  return ds;
}

ImageDataset load_fashion_mnist(const fs::path& dir, Split split, const ImageLoadOptions& opt) {
  const IdxPair p = find_idx_pair(dir, split);
  return load_idx_dataset(p.images, p.labels, opt);
}

ImageDataset synthetic_images(int64_t count, int64_t rows, int64_t cols, int num_classes,
                              uint64_t seed, float noise) {
  if (count <= 0 || rows <= 0 || cols <= 0 || num_classes <= 0 || !(noise >= 0)) {
    throw std::invalid_argument(fmt::format(
        "synthetic_images: need count, rows, cols, num_classes > 0 and noise >= 0; got {}, {}, "
        "{}, {}, {}",
        count, rows, cols, num_classes, noise));
  }
  ImageDataset ds;
  ds.count = count;
  ds.rows = rows;
  ds.cols = cols;
  ds.num_classes = num_classes;
  const int64_t s = rows * cols;
  // 53-bit uniform in [0, 1) from the top bits; specified exactly, unlike
  // std::uniform_real_distribution.
  std::mt19937_64 rng(derive_seed(seed, 0));
  auto uniform = [&] { return float(double(rng() >> 11) * 0x1.0p-53); };
  std::vector<float> proto(static_cast<size_t>(num_classes * s));
  for (float& p : proto) p = uniform();
  ds.images.resize(static_cast<size_t>(count * s));
  ds.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int32_t c = static_cast<int32_t>(uniform_below(rng, uint64_t(num_classes)));
    ds.labels[size_t(i)] = c;
    for (int64_t k = 0; k < s; ++k) {
      const float v = proto[size_t(c * s + k)] + noise * (2 * uniform() - 1);
      ds.images[size_t(i * s + k)] = std::clamp(v, 0.0f, 1.0f);
    }
  }
  return ds;
}

}  // namespace mixp::data
