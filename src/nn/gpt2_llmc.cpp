// llm.c's GPT-2 model file (nn/gpt2_weights.h): the header of its train_gpt2.c
// gpt2_build_from_checkpoint and the 16 stacked parameter tensors of fill_in_parameter_sizes.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <stdexcept>

#include "gpt2_weights_detail.h"
#include "mixp/io/atomic_file.h"
#include "mixp/nn/models.h"

namespace mixp::nn::detail {
namespace fs = std::filesystem;

namespace {

constexpr int32_t kMagic = 20240326;
constexpr int32_t kVersionFp32 = 3, kVersionBf16 = 5;
constexpr size_t kHeaderInts = 256, kHeaderBytes = kHeaderInts * sizeof(int32_t);

// One of llm.c's 16 tensors: the mixp leaf it holds (per layer, or whole), and its shape.
struct LlmcTensor {
  const char* name;  // llm.c's name, for messages
  const char* leaf;  // mixp name ("blocks.{}." prefixed when per_layer)
  bool per_layer;
};
constexpr LlmcTensor kOrder[] = {
    {"wte", "tok_emb.weight", false},       {"wpe", "pos_emb.weight", false},
    {"ln1w", "ln1.weight", true},           {"ln1b", "ln1.bias", true},
    {"qkvw", "attn.qkv.weight", true},      {"qkvb", "attn.qkv.bias", true},
    {"attprojw", "attn.proj.weight", true}, {"attprojb", "attn.proj.bias", true},
    {"ln2w", "ln2.weight", true},           {"ln2b", "ln2.bias", true},
    {"fcw", "mlp.fc.weight", true},         {"fcb", "mlp.fc.bias", true},
    {"fcprojw", "mlp.proj.weight", true},   {"fcprojb", "mlp.proj.bias", true},
    {"lnfw", "ln_f.weight", false},         {"lnfb", "ln_f.bias", false}};

std::array<int32_t, kHeaderInts> read_header(const fs::path& path) {
  std::array<int32_t, kHeaderInts> h{};
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("cannot open '{}' for reading", path.string()));
  if (!in.read(reinterpret_cast<char*>(h.data()), kHeaderBytes)) {
    throw std::invalid_argument(fmt::format("'{}': shorter than llm.c's {}-byte model header",
                                            path.string(), kHeaderBytes));
  }
  return h;
}

GptConfig config_of(const std::array<int32_t, kHeaderInts>& h, const std::string& source) {
  if (h[0] != kMagic) {
    throw std::invalid_argument(fmt::format(
        "'{}' is not an llm.c model file (magic {}, expected {})", source, h[0], kMagic));
  }
  if (h[1] != kVersionFp32 && h[1] != kVersionBf16) {
    throw std::invalid_argument(
        fmt::format("'{}': llm.c model file version {}; mixp reads version 3 (fp32) and 5 (bf16)",
                    source, h[1]));
  }
  GptConfig c;
  c.context = h[2];
  c.vocab = h[3];
  c.layers = h[4];
  c.heads = h[5];
  c.width = h[6];
  c.padded_vocab = h[7];
  c.mlp_width = 4 * c.width;
  c.tied_head = true;
  if (c.context <= 0 || c.vocab <= 0 || c.layers <= 0 || c.heads <= 0 || c.width <= 0 ||
      c.padded_vocab < c.vocab || c.width % c.heads != 0) {
    throw std::invalid_argument(fmt::format(
        "'{}': llm.c header has impossible sizes (max_seq_len {}, vocab {}, layers {}, heads {}, "
        "channels {}, padded vocab {})",
        source, c.context, c.vocab, c.layers, c.heads, c.width, c.padded_vocab));
  }
  return c;
}

// Shape of one layer's slice (or the whole tensor) of llm.c tensor `i`.
std::vector<int64_t> shape_of(int i, const GptConfig& c, int64_t rows) {
  const int64_t C = c.width;
  switch (i) {
    case 0:
      return {rows, C};
    case 1:
      return {c.context, C};
    case 4:
      return {3 * C, C};
    case 5:
      return {3 * C};
    case 6:
      return {C, C};
    case 10:
      return {4 * C, C};
    case 11:
      return {4 * C};
    case 12:
      return {C, 4 * C};
    default:
      return {C};
  }
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

bool is_llmc_model_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kMagic;
}

GptConfig read_llmc_config(const fs::path& path) {
  return config_of(read_header(path), path.string());
}

Gpt2Weights read_llmc_weights(const fs::path& path) {
  const std::string source = path.string();
  const auto header = read_header(path);
  Gpt2Weights w;
  w.config = config_of(header, source);
  const GptConfig& c = w.config;
  const DType dtype = header[1] == kVersionBf16 ? DType::bf16 : DType::fp32;
  const size_t e = size_t(traits(dtype).storage_bytes);
  int64_t total = 0;
  for (int i = 0; i < 16; ++i)
    total += numel(shape_of(i, c, c.padded_vocab)) * (kOrder[i].per_layer ? c.layers : 1);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  const uintmax_t want = kHeaderBytes + uintmax_t(total) * e;
  if (ec || size != want) {
    throw std::invalid_argument(fmt::format(
        "'{}': an llm.c {} model of this header holds {} parameters ({} bytes with the header) "
        "but the file has {} bytes; it is truncated or not an llm.c model file",
        source, name(dtype), total, want, size));
  }
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::streamoff(kHeaderBytes));
  std::vector<std::byte> data(size_t(total) * e);
  if (!in.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size()))) {
    throw std::invalid_argument(fmt::format("'{}': read error", source));
  }
  // Gather per mixp name; llm.c stacks each tensor over layers, mixp orders by layer.
  std::map<std::string, SafeTensor> by_name;
  size_t off = 0;
  for (int i = 0; i < 16; ++i) {
    const std::vector<int64_t> shape = shape_of(i, c, c.padded_vocab);
    const size_t bytes = size_t(numel(shape)) * e;
    const int64_t n = kOrder[i].per_layer ? c.layers : 1;
    for (int64_t l = 0; l < n; ++l) {
      const std::string nm = kOrder[i].per_layer ? fmt::format("blocks.{}.{}", l, kOrder[i].leaf)
                                                 : std::string(kOrder[i].leaf);
      SafeTensor s{nm, dtype, shape,
                   std::vector<std::byte>(data.begin() + std::ptrdiff_t(off),
                                          data.begin() + std::ptrdiff_t(off + bytes))};
      off += bytes;
      if (i == 0) s = with_rows(s, c.vocab);
      by_name.emplace(nm, std::move(s));
    }
  }
  for (const auto& [nm, shape] : gpt2_expected_shapes(c)) {
    w.tensors.tensors.push_back(std::move(by_name.at(nm)));
  }
  return w;
}

void write_llmc_weights(const Gpt2Weights& w, const fs::path& path, std::optional<DType> dtype) {
  const GptConfig& c = w.config;
  if (c.mlp_width != 4 * c.width) {
    throw std::invalid_argument(fmt::format(
        "llm.c's model file fixes the MLP width to 4 x channels ({}); this model has {}",
        4 * c.width, c.mlp_width));
  }
  DType dt = DType::fp32;
  if (dtype) {
    if (*dtype != DType::fp32 && *dtype != DType::bf16) {
      throw std::invalid_argument(fmt::format(
          "llm.c's model file stores fp32 (version 3) or bf16 (version 5), not {}", name(*dtype)));
    }
    dt = *dtype;
  } else {
    bool all_bf16 = true;
    for (const auto& s : w.tensors.tensors) all_bf16 &= s.dtype == DType::bf16;
    if (all_bf16) dt = DType::bf16;
  }
  const int64_t vp = c.padded_vocab > c.vocab ? c.padded_vocab : padded_vocab_size(c.vocab);
  std::array<int32_t, kHeaderInts> h{};
  h[0] = kMagic;
  h[1] = dt == DType::bf16 ? kVersionBf16 : kVersionFp32;
  h[2] = int32_t(c.context);
  h[3] = int32_t(c.vocab);
  h[4] = int32_t(c.layers);
  h[5] = int32_t(c.heads);
  h[6] = int32_t(c.width);
  h[7] = int32_t(vp);
  write_file_atomic_with(path, [&](AtomicFileWriter& out) {
    out.write(std::as_bytes(std::span(h)));
    for (int i = 0; i < 16; ++i) {
      const int64_t n = kOrder[i].per_layer ? c.layers : 1;
      for (int64_t l = 0; l < n; ++l) {
        const std::string nm = kOrder[i].per_layer ? fmt::format("blocks.{}.{}", l, kOrder[i].leaf)
                                                   : std::string(kOrder[i].leaf);
        SafeTensor s = as_dtype(*w.tensors.find(nm), dt);
        if (i == 0) s = with_rows(s, vp);
        out.write(s.data);
      }
    }
  });
}

}  // namespace mixp::nn::detail
