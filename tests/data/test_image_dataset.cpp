// ImageDataset loading: file discovery, validation across the two files, pixel scaling and
// normalization, and the real Fashion-MNIST when Debian's package is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "common/temp_dir.h"
#include "data/data_error.h"
#include "mixp/data/idx.h"
#include "mixp/data/image_dataset.h"

namespace mixp::data {
namespace {

using testing::data_error;
using ::testing::HasSubstr;
using mixp::test::TempDir;

uint8_t pixel(size_t i) {
  return uint8_t((i * 7 + i / 13) % 256);
}

void write_images(const std::filesystem::path& p, int64_t n, int64_t r, int64_t c, bool gz) {
  std::vector<uint8_t> px(size_t(n * r * c));
  for (size_t i = 0; i < px.size(); ++i) px[i] = pixel(i);
  write_idx(p, IdxType::u8, std::vector<int64_t>{n, r, c}, px, gz);
}

void write_labels(const std::filesystem::path& p, std::vector<uint8_t> l, bool gz) {
  write_idx(p, IdxType::u8, std::vector<int64_t>{int64_t(l.size())}, l, gz);
}

std::vector<uint8_t> cyc(int64_t n) {
  std::vector<uint8_t> l(static_cast<size_t>(n));
  for (size_t i = 0; i < l.size(); ++i) l[i] = uint8_t(i % 10);
  return l;
}

TEST(ImageDataset, LoadsGzipFolderWithScaling) {
  TempDir d;
  write_images(d / "train-images-idx3-ubyte.gz", 12, 3, 2, true);
  write_labels(d / "train-labels-idx1-ubyte.gz", cyc(12), true);
  const ImageDataset ds = load_fashion_mnist(d.path(), Split::train);
  EXPECT_EQ(ds.count, 12);
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.cols, 2);
  EXPECT_EQ(ds.num_classes, 10);
  ASSERT_EQ(ds.images.size(), 72u);
  ASSERT_EQ(ds.labels.size(), 12u);
  for (size_t i = 0; i < ds.images.size(); ++i) {
    // Bit-exact with torchvision's ToTensor: float32 division by 255.
    ASSERT_EQ(std::bit_cast<uint32_t>(ds.images[i]),
              std::bit_cast<uint32_t>(float(pixel(i)) / 255.0f));
  }
  EXPECT_EQ(ds.labels[11], 1);
  EXPECT_EQ(ds.image(2)[0], ds.images[12]);
}

TEST(ImageDataset, PlainAndMnistStyleNamesLimitAndNormalize) {
  TempDir d;
  write_images(d / "t10k-images.idx3-ubyte", 20, 2, 2, false);
  write_labels(d / "t10k-labels.idx1-ubyte", cyc(20), false);
  const IdxPair p = find_idx_pair(d.path(), Split::test);
  EXPECT_EQ(p.images.filename(), "t10k-images.idx3-ubyte");
  ImageLoadOptions o;
  o.limit = 5;
  o.normalize = true;
  const ImageDataset ds = load_fashion_mnist(d.path(), Split::test, o);
  EXPECT_EQ(ds.count, 5);
  ASSERT_EQ(ds.images.size(), 20u);
  for (size_t i = 0; i < ds.images.size(); ++i) {
    const float x = float(pixel(i)) / 255.0f;  // then torchvision's Normalize: (x - m) / s
    ASSERT_EQ(ds.images[i], (x - kFashionMnistMean) / kFashionMnistStd);
  }
  o.limit = 1000;  // more than present: all
  EXPECT_EQ(load_fashion_mnist(d.path(), Split::test, o).count, 20);
}

TEST(ImageDataset, MissingFolderNamesThePackage) {
  TempDir d;
  std::string m = data_error([&] { load_fashion_mnist(d / "absent", Split::train); });
  EXPECT_THAT(m, HasSubstr("does not exist"));
  EXPECT_THAT(m, HasSubstr("apt-get install dataset-fashion-mnist"));
  m = data_error([&] { load_fashion_mnist(d.path(), Split::test); });
  EXPECT_THAT(m, HasSubstr("no test images file: looked for t10k-images-idx3-ubyte.gz, "
                           "t10k-images-idx3-ubyte, t10k-images.idx3-ubyte.gz"));
  EXPECT_THAT(m, HasSubstr("apt-get install dataset-fashion-mnist"));
  write_images(d / "train-images-idx3-ubyte", 3, 2, 2, false);
  m = data_error([&] { load_fashion_mnist(d.path(), Split::train); });
  EXPECT_THAT(m, HasSubstr("no training labels file: looked for train-labels-idx1-ubyte.gz"));
}

TEST(ImageDataset, CountMismatch) {
  TempDir d;
  write_images(d / "i", 5, 2, 2, false);
  write_labels(d / "l", cyc(4), true);
  const std::string m = data_error([&] { load_idx_dataset(d / "i", d / "l"); });
  EXPECT_THAT(m, HasSubstr("holds 5 images but"));
  EXPECT_THAT(m, HasSubstr("holds 4 labels"));
}

TEST(ImageDataset, LabelOutOfRange) {
  TempDir d;
  write_images(d / "i", 4, 2, 2, false);
  write_labels(d / "l", {0, 9, 10, 1}, false);
  const std::string m = data_error([&] { load_idx_dataset(d / "i", d / "l"); });
  EXPECT_THAT(m, HasSubstr("label 10 of record 2 (byte 10) is outside [0, 10)"));
  ImageLoadOptions o;
  o.num_classes = 0;  // infer
  EXPECT_EQ(load_idx_dataset(d / "i", d / "l", o).num_classes, 11);
}

TEST(ImageDataset, SwappedFilesAndWrongRank) {
  TempDir d;
  write_images(d / "i", 4, 2, 2, false);
  write_labels(d / "l", cyc(4), false);
  EXPECT_THAT(data_error([&] { load_idx_dataset(d / "l", d / "i"); }),
              HasSubstr("magic 0x00000801 is not an image file (expected 0x00000803"));
  write_idx(d / "i2", IdxType::u8, std::vector<int64_t>{4, 4}, std::vector<uint8_t>(16), false);
  EXPECT_THAT(data_error([&] { load_idx_dataset(d / "i2", d / "l"); }),
              HasSubstr("0x00000802 is not an image file"));
  EXPECT_THAT(data_error([&] { load_idx_dataset(d / "i", d / "i"); }),
              HasSubstr("is not a label file (expected 0x00000801"));
}

TEST(ImageDataset, FloatImagesWithNaNAreRefused) {
  TempDir d;
  std::vector<float> v(3 * 2 * 4, 0.5f);
  v[1 * 8 + 1 * 4 + 3] = std::numeric_limits<float>::quiet_NaN();  // sample 1, row 1, col 3
  std::vector<uint8_t> be;
  for (float f : v) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    for (int s = 24; s >= 0; s -= 8) be.push_back(uint8_t(u >> s));
  }
  write_idx(d / "i", IdxType::f32, std::vector<int64_t>{3, 2, 4}, be, false);
  write_labels(d / "l", cyc(3), false);
  const std::string m = data_error([&] { load_idx_dataset(d / "i", d / "l"); });
  EXPECT_THAT(m, HasSubstr("pixel value nan at sample 1, row 1, col 3 (byte 76) is not finite"));
  // Without the NaN, float32 images are taken as they are.
  v[15] = 0.25f;
  for (size_t i = 0; i < 4; ++i)
    be[15 * 4 + i] = uint8_t(std::bit_cast<uint32_t>(0.25f) >> (24 - 8 * i));
  write_idx(d / "i", IdxType::f32, std::vector<int64_t>{3, 2, 4}, be, false);
  const ImageDataset ds = load_idx_dataset(d / "i", d / "l");
  EXPECT_EQ(ds.images, v);
}

TEST(ImageDataset, BadOptions) {
  TempDir d;
  write_images(d / "i", 4, 2, 2, false);
  write_labels(d / "l", cyc(4), false);
  ImageLoadOptions o;
  o.normalize = true;
  o.stddev = 0;
  EXPECT_THROW(load_idx_dataset(d / "i", d / "l", o), std::invalid_argument);
  o = {};
  o.limit = -1;
  EXPECT_THROW(load_idx_dataset(d / "i", d / "l", o), std::invalid_argument);
}

TEST(ImageDataset, Synthetic) {
  const ImageDataset a = synthetic_images(64, 4, 4, 3, 7);
  const ImageDataset b = synthetic_images(64, 4, 4, 3, 7);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(synthetic_images(64, 4, 4, 3, 8).images, a.images);
  EXPECT_EQ(a.images.size(), 64u * 16);
  for (float x : a.images) ASSERT_TRUE(x >= 0 && x <= 1);
  std::array<int, 3> hist{};
  for (int32_t l : a.labels) hist[size_t(l)]++;
  for (int h : hist) EXPECT_GT(h, 5);
}

// The real data set, when Debian's package is installed.
TEST(FashionMnist, RealDataWhenInstalled) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "apt-get install dataset-fashion-mnist to run this test";
  }
  const ImageDataset train = load_fashion_mnist();
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(train.rows, 28);
  EXPECT_EQ(train.cols, 28);
  EXPECT_EQ(train.num_classes, 10);
  std::array<int, 10> hist{};
  for (int32_t l : train.labels) hist[size_t(l)]++;
  for (int h : hist) EXPECT_EQ(h, 6000);
  EXPECT_EQ(train.labels[0], 9);  // the first training image is an ankle boot
  // The normalization constants are this set's pixel statistics.
  double sum = 0, sq = 0;
  for (float x : train.images) {
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / double(train.images.size());
  const double sd = std::sqrt(sq / double(train.images.size()) - mean * mean);
  EXPECT_NEAR(mean, kFashionMnistMean, 1e-4);
  EXPECT_NEAR(sd, kFashionMnistStd, 1e-4);

  ImageLoadOptions o;
  o.limit = 100;
  const ImageDataset test = load_fashion_mnist(kFashionMnistDir, Split::test, o);
  EXPECT_EQ(test.count, 100);
  EXPECT_EQ(test.images.size(), 100u * 784);
  EXPECT_EQ(fashion_mnist_class_names()[size_t(train.labels[0])], "Ankle boot");
}

}  // namespace
}  // namespace mixp::data
