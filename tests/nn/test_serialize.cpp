// nn::save / nn::load / nn::convert_module (mixp/nn/serialize.h): round trips bit for bit, a
// smaller file in bf16, clear errors naming the file and the tensor, identity kept by conversion.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "mixp/mixp.h"

namespace mixp::nn {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mixp_serialize_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::shared_ptr<Module> mlp(uint64_t seed) {
  return make_model({.name = "mlp", .seed = seed});
}

TEST(Serialize, SaveThenLoadIsBitExact) {
  auto a = mlp(1), b = mlp(2);
  const fs::path p = temp_path("mlp.safetensors");
  save(*a, p);
  load(*b, p);
  const NamedTensors sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second.to_double_vector(), sb[i].second.to_double_vector()) << sa[i].first;
  }
  // PyTorch-style names in the file
  const SafeTensorsFile f = read_safetensors(p);
  ASSERT_NE(f.find("fc1.weight"), nullptr);
  EXPECT_EQ(f.find("fc1.weight")->dtype, DType::fp32);
}

TEST(Serialize, Bf16FileIsHalfTheSizeAndLoadsConverted) {
  auto a = mlp(1), b = mlp(2);
  const fs::path p32 = temp_path("a32.safetensors"), p16 = temp_path("a16.safetensors");
  save(*a, p32);
  save(*a, p16, {.dtype = DType::bf16, .metadata = {{"format", "pt"}}});
  EXPECT_LT(fs::file_size(p16), fs::file_size(p32) / 2 + 4096);
  const SafeTensorsFile f = read_safetensors(p16);
  EXPECT_EQ(f.find("fc1.weight")->dtype, DType::bf16);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  load(*b, p16);  // into an fp32 model: widened exactly
  const Tensor w = a->parameter("fc1.weight");
  EXPECT_EQ(b->parameter("fc1.weight").to_double_vector(),
            w.to(DType::bf16, Round::nearest_even).to(DType::fp32).to_double_vector());
  EXPECT_EQ(b->parameter("fc1.weight").dtype(), DType::fp32);
}

TEST(Serialize, MismatchesNameTheFileAndTensor) {
  auto a = mlp(1);
  auto wide = make_model({.name = "mlp", .width = 64, .seed = 1});
  const fs::path p = temp_path("wide.safetensors");
  save(*wide, p);
  try {
    load(*a, p);
    FAIL() << "a model of another width must not load";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(p.string()), std::string::npos) << m;
    EXPECT_NE(m.find("fc1.weight"), std::string::npos) << m;
  }
  // an extra tensor: refused by default, ignored with strict = false
  SafeTensorsFile f = to_safetensors(*a);
  f.tensors.push_back(to_safetensor("extra", zeros({2})));
  EXPECT_THROW(load_safetensors(*a, f, "mem"), std::invalid_argument);
  EXPECT_NO_THROW(load_safetensors(*a, f, "mem", {.strict = false}));
}

TEST(Serialize, ConvertModuleKeepsTensorIdentity) {
  auto a = mlp(1);
  Tensor handle = a->parameter("fc1.weight");
  const std::vector<double> before = handle.to_double_vector();
  convert_module(*a, DType::bf16);
  EXPECT_EQ(handle.dtype(), DType::bf16);  // the same TensorImpl, now bf16
  EXPECT_EQ(a->parameter("fc1.weight").dtype(), DType::bf16);
  Tensor ref = from_vector(before, handle.shape()).to(DType::bf16, Round::nearest_even);
  EXPECT_EQ(handle.to_double_vector(), ref.to_double_vector());
}

}  // namespace
}  // namespace mixp::nn
