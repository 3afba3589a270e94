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
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) &&
         (magic == kTokenFileMagic || magic == kTokenFileMagic32);
}

namespace {

// What a header says: the ids' width, the vocabulary and the count.
struct Header {
  TokenWidth width;
  int vocab;
  int64_t count;
};

// The two layouts llm.c writes: its magic and version, and the other one's, for the message.
struct Layout {
  int32_t magic, version;
  const char* ids;
};
constexpr Layout kU16{kTokenFileMagic, kTokenFileVersion, "uint16"};
constexpr Layout kU32{kTokenFileMagic32, kTokenFileVersion32, "uint32"};

void check_version(const std::string& p, int32_t version, const Layout& is, const Layout& other) {
  if (version == is.version) return;
  throw DataError(fmt::format(
      "token file '{}' has version {}; mixp reads llm.c's version {} ({} ids) with magic {} and "
      "version {} ({} ids) with magic {}",
      p, version, is.version, is.ids, is.magic, other.version, other.ids, other.magic));
}

Header check_header(const std::string& p, const int32_t* header) {
  Header h{};
  if (header[0] == kTokenFileMagic) {
    h.width = TokenWidth::u16;
    check_version(p, header[1], kU16, kU32);
  } else if (header[0] == kTokenFileMagic32) {
    h.width = TokenWidth::u32;
    check_version(p, header[1], kU32, kU16);
  } else {
    throw DataError(fmt::format(
        "'{}' is not an llm.c token file: its first int32 is {}, the magic is {} (uint16 ids) or "
        "{} (uint32 ids)",
        p, header[0], kTokenFileMagic, kTokenFileMagic32));
  }
  const int64_t max_vocab = h.width == TokenWidth::u16 ? 65536 : kMaxTokenFileVocab;
  if (header[3] < 0 || header[3] > max_vocab) {
    throw DataError(fmt::format(
        "token file '{}' states a vocabulary of {} (header[3]); a {} file's is 1 to {}, or 0 "
        "for llm.c's default",
        p, header[3], h.width == TokenWidth::u16 ? "uint16" : "uint32", max_vocab));
  }
  h.vocab = header[3] != 0 ? header[3]
                           : (h.width == TokenWidth::u16 ? kGpt2TokenVocab : kLlama3TokenVocab);
  h.count = header[2];
  return h;
}

// Maps `path`, checks its header and tokens; returns the token span and the vocabulary.
std::pair<TokenSpan, int> map_tokens(const fs::path& path, TokenCorpus::Mapping& m) {
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
  const Header h = check_header(p, header);
  const size_t width = h.width == TokenWidth::u16 ? 2 : 4;
  if (h.count < 0 || kHeaderBytes + size_t(h.count) * width != bytes) {
    throw DataError(fmt::format(
        "token file '{}' says it holds {} tokens ({} bytes with the header) but has {} bytes; the "
        "file is truncated or not a token file",
        p, h.count, kHeaderBytes + size_t(std::max<int64_t>(h.count, 0)) * width, bytes));
  }
  const TokenSpan span(static_cast<const std::byte*>(m.addr) + kHeaderBytes, size_t(h.count),
                       h.width);
  const uint32_t vocab = uint32_t(h.vocab);
  for (size_t i = 0; i < span.size(); ++i) {
    if (span[i] >= vocab) {
      throw DataError(fmt::format("token file '{}': token {} at position {} is outside {}", p,
                                  span[i], i,
                                  h.vocab == kGpt2TokenVocab && h.width == TokenWidth::u16
                                      ? fmt::format("GPT-2's vocabulary of {}", h.vocab)
                                      : fmt::format("the vocabulary of {}", h.vocab)));
    }
  }
  return {span, h.vocab};
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
  const auto [all, vocab] = map_tokens(file, *c.train_map_);
  c.vocab_ = vocab;
  if (all.empty()) throw DataError(fmt::format("token file '{}' holds no tokens", c.source_));
  const std::string name = file.filename().string();
  const std::string suffix = "_train.bin";
  std::error_code ec;
  if (name.size() > suffix.size() && name.ends_with(suffix)) {
    const fs::path val =
        file.parent_path() / (name.substr(0, name.size() - suffix.size()) + "_val.bin");
    if (fs::is_regular_file(val, ec)) {
      c.val_map_ = std::make_unique<Mapping>();
      const auto [val_tokens, val_vocab] = map_tokens(val, *c.val_map_);
      if (val_vocab != vocab || val_tokens.width() != all.width()) {
        throw DataError(fmt::format(
            "token file '{}' (vocabulary {}, {} ids) and its validation file '{}' (vocabulary {}, "
            "{} ids) differ; tokenize both with the same tokenizer",
            c.source_, vocab, all.width() == TokenWidth::u16 ? "uint16" : "uint32", val.string(),
            val_vocab, val_tokens.width() == TokenWidth::u16 ? "uint16" : "uint32"));
      }
      c.val_ = val_tokens;
      c.train_ = all;
      c.source_ += " (validation: " + val.filename().string() + ")";
      return c;
    }
  }
  const size_t nval = size_t(std::floor(double(all.size()) * opt.val_fraction));
  c.train_ = all.subspan(0, all.size() - nval);
  c.val_ = all.subspan(all.size() - nval, nval);
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
void widen(const TokenSpan& src, size_t offset, size_t n, int32_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = int32_t(src[offset + i]);
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
    widen(train_, off, ctx, inputs.data() + size_t(b) * ctx);
    widen(train_, off + 1, ctx, targets.data() + size_t(b) * ctx);
  }
}

int64_t TokenCorpus::num_val_windows(int64_t context) const {
  require_context(context);
  return val_.empty() ? 0 : (int64_t(val_.size()) - 1) / context;
}

int64_t TokenCorpus::val_batch(int64_t index, int64_t batch, int64_t context,
                               std::span<int32_t> inputs, std::span<int32_t> targets) const {
  check_buffers(batch, context, inputs.size(), targets.size(), "val_batch");
  const auto* data = val_.bytes().data();
  if (val_.width() == TokenWidth::u16) {
    return detail::copy_val_windows(reinterpret_cast<const uint16_t*>(data),
                                    num_val_windows(context), index, batch, context, inputs,
                                    targets);
  }
  return detail::copy_val_windows(reinterpret_cast<const uint32_t*>(data),
                                  num_val_windows(context), index, batch, context, inputs, targets);
}

}  // namespace mixp::data
