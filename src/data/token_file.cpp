// llm.c token files, memory-mapped (data/token_file.h).
#include "mixp/data/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>

#include "mixp/data/error.h"
#include "mixp/data/random.h"
#include "token_windows.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {
constexpr size_t kHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);
}

// One read-only mapping of a whole file.
struct TokenCorpus::Mapping {
  void* addr = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
  }
};

bool is_token_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kTokenFileMagic;
}

void write_token_file(const fs::path& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > size_t(INT32_MAX)) {
    throw DataError(fmt::format("'{}': {} tokens do not fit the header's int32 count",
                                path.string(), tokens.size()));
  }
  std::array<int32_t, kTokenFileHeaderInts> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = int32_t(tokens.size());
  const fs::path tmp = path.string() + ".tmp-mixp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()), kHeaderBytes);
    out.write(reinterpret_cast<const char*>(tokens.data()),
              std::streamsize(tokens.size() * sizeof(uint16_t)));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw DataError(fmt::format("cannot write token file '{}'", path.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw DataError(fmt::format("cannot write token file '{}': {}", path.string(), ec.message()));
  }
}

namespace {

// Maps `path`, checks its header and tokens; returns the token span.
std::span<const uint16_t> map_tokens(const fs::path& path, TokenCorpus::Mapping& m) {
  const std::string p = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError(
        fmt::format("token file '{}' cannot be opened: {}; pass --data with an llm.c "
                    ".bin token file",
                    p, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(fmt::format("token file '{}' is not a regular file", p));
  }
  const size_t bytes = size_t(st.st_size);
  if (bytes < kHeaderBytes) {
    ::close(fd);
    throw DataError(fmt::format("token file '{}' has {} bytes, less than llm.c's {}-byte header", p,
                                bytes, kHeaderBytes));
  }
  m.addr = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m.addr == MAP_FAILED) {
    throw DataError(fmt::format("token file '{}' cannot be mapped: {}", p, std::strerror(errno)));
  }
  m.bytes = bytes;
  int32_t header[kTokenFileHeaderInts];
  std::memcpy(header, m.addr, kHeaderBytes);
  if (header[0] != kTokenFileMagic) {
    throw DataError(
        fmt::format("'{}' is not an llm.c token file: its first int32 is {}, the magic is {}", p,
                    header[0], kTokenFileMagic));
  }
  if (header[1] != kTokenFileVersion) {
    throw DataError(
        fmt::format("token file '{}' has version {}; mixp reads version {} (uint16 "
                    "GPT-2 tokens)",
                    p, header[1], kTokenFileVersion));
  }
  const int64_t count = header[2];
  if (count < 0 || kHeaderBytes + size_t(count) * sizeof(uint16_t) != bytes) {
    throw DataError(fmt::format(
        "token file '{}' says it holds {} tokens ({} bytes with the header) but has {} bytes; the "
        "file is truncated or not a token file",
        p, count, kHeaderBytes + size_t(std::max<int64_t>(count, 0)) * 2, bytes));
  }
  const auto* tokens =
      reinterpret_cast<const uint16_t*>(static_cast<const std::byte*>(m.addr) + kHeaderBytes);
  std::span<const uint16_t> span(tokens, size_t(count));
  const auto bad =
      std::find_if(span.begin(), span.end(), [](uint16_t t) { return t >= kGpt2TokenVocab; });
  if (bad != span.end()) {
    throw DataError(
        fmt::format("token file '{}': token {} at position {} is outside GPT-2's "
                    "vocabulary of {}",
                    p, *bad, bad - span.begin(), kGpt2TokenVocab));
  }
  return span;
}

}  // namespace

TokenCorpus::TokenCorpus() = default;
TokenCorpus::~TokenCorpus() = default;
TokenCorpus::TokenCorpus(TokenCorpus&&) noexcept = default;
TokenCorpus& TokenCorpus::operator=(TokenCorpus&&) noexcept = default;

TokenCorpus TokenCorpus::load(const fs::path& file, const CorpusOptions& opt) {
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("val_fraction {} outside [0, 1)", opt.val_fraction));
  }
  TokenCorpus c;
  c.source_ = file.string();
  c.train_map_ = std::make_unique<Mapping>();
  const std::span<const uint16_t> all = map_tokens(file, *c.train_map_);
  if (all.empty()) throw DataError(fmt::format("token file '{}' holds no tokens", c.source_));
  const std::string name = file.filename().string();
  const std::string suffix = "_train.bin";
  std::error_code ec;
  if (name.size() > suffix.size() && name.ends_with(suffix)) {
    const fs::path val =
        file.parent_path() / (name.substr(0, name.size() - suffix.size()) + "_val.bin");
    if (fs::is_regular_file(val, ec)) {
      c.val_map_ = std::make_unique<Mapping>();
      c.val_ = map_tokens(val, *c.val_map_);
      c.train_ = all;
      c.source_ += " (validation: " + val.filename().string() + ")";
      return c;
    }
  }
  const size_t nval = size_t(std::floor(double(all.size()) * opt.val_fraction));
  c.train_ = all.first(all.size() - nval);
  c.val_ = all.subspan(all.size() - nval);
  return c;
}

void TokenCorpus::require_context(int64_t context) const {
  if (context <= 0) throw std::invalid_argument(fmt::format("context {} must be > 0", context));
  if (int64_t(train_.size()) < context + 1) {
    throw DataError(fmt::format(
        "token file '{}' is too short for context {}: its training split has {} tokens but one "
        "window needs context + 1 = {}; use a longer file or a smaller --context",
        source_, context, train_.size(), context + 1));
  }
  if (!val_.empty() && int64_t(val_.size()) < context + 1) {
    throw DataError(fmt::format(
        "token file '{}' is too short for context {}: its validation split has {} tokens but one "
        "window needs context + 1 = {}; use a longer file or a smaller --context",
        source_, context, val_.size(), context + 1));
  }
}

namespace {
void widen(const uint16_t* src, size_t n, int32_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}
void check_buffers(int64_t batch, int64_t context, size_t in, size_t tgt, const char* fn) {
  if (batch <= 0) throw std::invalid_argument(fmt::format("{}: batch {} must be > 0", fn, batch));
  const size_t need = size_t(batch * context);
  if (in < need || tgt < need) {
    throw std::invalid_argument(
        fmt::format("{}: buffers of {} and {} values are too small for batch {} x context {}", fn,
                    in, tgt, batch, context));
  }
}
}  // namespace

void TokenCorpus::sample_batch(std::mt19937_64& rng, int64_t batch, int64_t context,
                               std::span<int32_t> inputs, std::span<int32_t> targets) const {
  require_context(context);
  check_buffers(batch, context, inputs.size(), targets.size(), "sample_batch");
  const uint64_t offsets = uint64_t(int64_t(train_.size()) - context);
  const size_t ctx = size_t(context);
  for (int64_t b = 0; b < batch; ++b) {
    const size_t off = size_t(uniform_below(rng, offsets));
    widen(train_.data() + off, ctx, inputs.data() + size_t(b) * ctx);
    widen(train_.data() + off + 1, ctx, targets.data() + size_t(b) * ctx);
  }
}

int64_t TokenCorpus::num_val_windows(int64_t context) const {
  require_context(context);
  return val_.empty() ? 0 : (int64_t(val_.size()) - 1) / context;
}

int64_t TokenCorpus::val_batch(int64_t index, int64_t batch, int64_t context,
                               std::span<int32_t> inputs, std::span<int32_t> targets) const {
  check_buffers(batch, context, inputs.size(), targets.size(), "val_batch");
  return detail::copy_val_windows(val_.data(), num_val_windows(context), index, batch, context,
                                  inputs, targets);
}

}  // namespace mixp::data
