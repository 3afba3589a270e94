// The gradient reductions of grad_reduce.h over a ProcessGroup's all-to-all, all-gather and
// send-receive.
#include "mixp/dist/grad_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "mixp/format/convert.h"

namespace mixp::dist {
namespace {

constexpr ConvertOptions kNearest{.round = Round::nearest_even, .overflow = Overflow::ieee};

std::span<std::byte> bytes_of(std::vector<std::byte>& v) {
  return {v.data(), v.size()};
}

size_t total_size(const Segments& segs) {
  size_t n = 0;
  for (const auto& s : segs) n += s.size();
  return n;
}

// weight * src, narrowed to `wire` into dst_bits (src.size() elements), in cache-sized chunks so
// that the product never makes a pass of its own over memory.
void scale_into(DType wire, std::span<const float> src, float weight, std::byte* dst_bits,
                std::vector<float>& tmp) {
  if (wire == DType::fp32) {  // nothing to narrow: the products go straight to the wire buffer
    float* dst = reinterpret_cast<float*>(dst_bits);
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i] * weight;
    return;
  }
  constexpr size_t kChunk = 4096;
  const size_t es = traits(wire).bits / 8;
  tmp.resize(kChunk);
  for (size_t i = 0; i < src.size(); i += kChunk) {
    const size_t m = std::min(kChunk, src.size() - i);
    for (size_t k = 0; k < m; ++k) tmp[k] = src[i + k] * weight;
    convert_f32_to(wire, std::span<const float>(tmp.data(), m), dst_bits + i * es, kNearest);
  }
}

// The segments, weighted and narrowed, end to end into dst_bits.
void pack(DType wire, const Segments& segs, float weight, std::byte* dst_bits,
          std::vector<float>& tmp) {
  const size_t es = traits(wire).bits / 8;
  for (const auto& seg : segs) {
    scale_into(wire, seg, weight, dst_bits, tmp);
    dst_bits += seg.size() * es;
  }
}

// fn(part, at) for the parts of elements [begin, begin + count) of the segments laid end to end;
// `at` is the part's offset from `begin`.
template <class F>
void for_range(const Segments& segs, size_t begin, size_t count, F&& fn) {
  size_t at = 0;  // offset of the current segment
  for (const auto& seg : segs) {
    const size_t lo = std::max(at, begin), hi = std::min(at + seg.size(), begin + count);
    if (lo < hi) fn(seg.subspan(lo - at, hi - lo), lo - begin);
    at += seg.size();
    if (at >= begin + count) return;
  }
}

// Elements [begin, begin + count) of the segments, weighted and narrowed, into dst_bits (the same
// values as pack() writes there).
void pack_range(DType wire, const Segments& segs, size_t begin, size_t count, float weight,
                std::byte* dst_bits, std::vector<float>& tmp) {
  const size_t es = traits(wire).bits / 8;
  for_range(segs, begin, count, [&](std::span<float> part, size_t at) {
    scale_into(wire, part, weight, dst_bits + at * es, tmp);
  });
}

// Elements [begin, begin + count) of the segments laid end to end <- widened src_bits.
// m values of a contribution in the wire format as fp32: in itself for an fp32 wire, else widened
// (exactly) into tmp.
const float* widened(DType wire, const std::byte* in, size_t m, float* tmp) {
  if (wire == DType::fp32) return reinterpret_cast<const float*>(in);
  convert_to_f32(wire, in, std::span<float>(tmp, m));
  return tmp;
}

// Rank r's contribution x added to the owner's fp32 sum, ranks in order. Rank 0 writes 0 + x: the
// same sums as from a zeroed accumulator, signed zeros included, without a separate zeroing pass.
void add_in_rank_order(float* acc, const float* x, size_t m, int r) {
  if (r == 0) {
    for (size_t k = 0; k < m; ++k) acc[k] = 0.0f + x[k];
  } else {
    for (size_t k = 0; k < m; ++k) acc[k] += x[k];
  }
}

void unpack(DType wire, const std::byte* src_bits, const Segments& segs, size_t begin,
            size_t count) {
  const size_t es = traits(wire).bits / 8;
  size_t at = 0;  // offset of the current segment
  for (const auto& seg : segs) {
    const size_t lo = std::max(at, begin), hi = std::min(at + seg.size(), begin + count);
    if (lo < hi) {
      convert_to_f32(wire, src_bits + (lo - begin) * es, seg.subspan(lo - at, hi - lo));
    }
    at += seg.size();
  }
}

// The naive ring: reduce-scatter by N-1 hops, each rounding the partial sum to bf16, then an
// all-gather ring of N-1 hops.
void ring_bf16(ProcessGroup& g, std::span<float> buf, float weight, ReduceWorkspace& ws) {
  const int n = g.size(), r = g.rank();
  const size_t piece = (buf.size() + size_t(n) - 1) / size_t(n);
  ws.send.resize(piece * size_t(n) * 2);
  ws.recv.resize(piece * 2);
  scale_into(DType::bf16, buf, weight, ws.send.data(), ws.tmp);
  std::fill(ws.send.begin() + std::ptrdiff_t(buf.size() * 2), ws.send.end(), std::byte{0});
  uint16_t* bits = reinterpret_cast<uint16_t*>(ws.send.data());
  uint16_t* incoming = reinterpret_cast<uint16_t*>(ws.recv.data());
  ws.acc.resize(piece);
  ws.tmp.resize(piece);
  auto chunk = [&](int c) { return bits + size_t(((c % n) + n) % n) * piece; };
  auto as_bytes = [](uint16_t* p, size_t count) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(p), count * 2);
  };
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    g.sendrecv(as_bytes(chunk(r - s), piece), next, as_bytes(incoming, piece), prev);
    uint16_t* own = chunk(r - s - 1);
    convert_to_f32(DType::bf16, incoming, ws.acc);
    convert_to_f32(DType::bf16, own, ws.tmp);
    for (size_t k = 0; k < piece; ++k) ws.acc[k] += ws.tmp[k];
    convert_f32_to(DType::bf16, ws.acc, own, kNearest);  // one rounding per hop
  }
  // Rank r now holds the full sum of chunk r + 1; pass the sums around the ring.
  for (int s = 0; s < n - 1; ++s) {
    g.sendrecv(as_bytes(chunk(r + 1 - s), piece), next, as_bytes(chunk(r - s), piece), prev);
  }
  convert_to_f32(DType::bf16, bits, buf);
}

}  // namespace

GradComm parse_grad_comm(std::string_view name) {
  if (name == "fp32") return GradComm::fp32;
  if (name == "bf16") return GradComm::bf16;
  if (name == "fp16") return GradComm::fp16;
  if (name == "bf16-ring") return GradComm::bf16_ring;
  throw std::invalid_argument(fmt::format(
      "unknown gradient communication format '{}'; use one of fp32, bf16, fp16, bf16-ring", name));
}

std::string grad_comm_name(GradComm c) {
  switch (c) {
    case GradComm::fp32: return "fp32";
    case GradComm::bf16: return "bf16";
    case GradComm::fp16: return "fp16";
    case GradComm::bf16_ring: return "bf16-ring";
  }
  return "?";
}

const std::vector<std::string>& grad_comm_names() {
  static const std::vector<std::string> names{"fp32", "bf16", "fp16", "bf16-ring"};
  return names;
}

DType wire_dtype(GradComm c) {
  switch (c) {
    case GradComm::fp32: return DType::fp32;
    case GradComm::bf16: return DType::bf16;
    case GradComm::fp16: return DType::fp16;
    case GradComm::bf16_ring: return DType::bf16;
  }
  return DType::fp32;
}

int wire_bytes(GradComm c) {
  return traits(wire_dtype(c)).bits / 8;
}

void reduce_weighted_sum(ProcessGroup& g, std::span<float> buf, float weight, GradComm mode,
                         ReduceWorkspace* workspace) {
  ReduceWorkspace local;
  PendingReduce r;
  r.start(g, Segments{buf}, weight, mode, workspace ? *workspace : local);
  r.finish();
}

size_t PendingReduce::shared_bytes(size_t elems, int ranks, GradComm mode, bool to_owners) {
  const size_t es = size_t(wire_bytes(mode));
  if (to_owners) return elems * es;
  return (elems + size_t(ranks) - 1) / size_t(ranks) * size_t(ranks) * es;
}

// fp32/bf16/fp16: reduce-scatter by all-to-all with the owner summing in fp32 in rank order, then
// all-gather of the rounded sums. Each rank owns `piece` elements; the tail past the values is
// zero padding.

void PendingReduce::start(ProcessGroup& g, Segments buf, float weight, GradComm mode,
                          ReduceWorkspace& ws, SharedMemory* shared) {
  if (active()) throw std::logic_error("PendingReduce::start: a reduction is still in flight");
  const size_t total = total_size(buf);
  if (g.size() == 1) {
    if (weight != 1.0f) {
      for (const auto& seg : buf) for (float& x : seg) x *= weight;
    }
    return;
  }
  if (mode == GradComm::bf16_ring) {
    // A demonstration mode: on one flat copy.
    std::vector<float> flat(total);
    size_t at = 0;
    for (const auto& seg : buf) {
      std::copy(seg.begin(), seg.end(), flat.begin() + std::ptrdiff_t(at));
      at += seg.size();
    }
    ring_bf16(g, flat, weight, ws);
    at = 0;
    for (const auto& seg : buf) {
      std::copy_n(flat.begin() + std::ptrdiff_t(at), seg.size(), seg.begin());
      at += seg.size();
    }
    return;
  }
  begin(g, std::move(buf), total, mode, ws);
  const int n = g.size();
  piece_ = (total + size_t(n) - 1) / size_t(n);
  if (shared) {
    shared_ = shared;
    offset_.clear();
    for (int r = 0; r <= n; ++r) offset_.push_back(std::min(total, size_t(r) * piece_));
    start_shared(weight);
    return;
  }
  const size_t es = traits(wire_).bits / 8;
  ws.send.resize(piece_ * size_t(n) * es);
  ws.recv.resize(ws.send.size());
  pack(wire_, buf_, weight, ws.send.data(), ws.tmp);
  std::fill(ws.send.begin() + std::ptrdiff_t(total * es), ws.send.end(), std::byte{0});
  req_ = g.ialltoall(ws.send, ws.recv);
}

void PendingReduce::begin(ProcessGroup& g, Segments buf, size_t total, GradComm mode,
                          ReduceWorkspace& ws) {
  g_ = &g;
  buf_ = std::move(buf);
  total_ = total;
  ws_ = &ws;
  wire_ = wire_dtype(mode);
  phase_ = Phase::scatter;
  shared_ = nullptr;
}

void PendingReduce::start_to_owners(ProcessGroup& g, Segments buf,
                                    std::span<const size_t> counts, float weight, GradComm mode,
                                    ReduceWorkspace& ws, SharedMemory* shared) {
  if (active()) throw std::logic_error("PendingReduce::start: a reduction is still in flight");
  if (mode == GradComm::bf16_ring) {
    throw std::invalid_argument("the reduction to owners (ZeRO 2) has no bf16-ring variant");
  }
  if (g.size() == 1) {
    start(g, std::move(buf), weight, mode, ws);
    return;
  }
  const size_t total = total_size(buf);
  begin(g, std::move(buf), total, mode, ws);
  counts_.assign(counts.begin(), counts.end());
  const int n = g.size();
  const size_t es = traits(wire_).bits / 8;
  piece_ = counts_[size_t(g.rank())];
  if (shared) {
    shared_ = shared;
    offset_.assign(1, 0);
    for (int r = 0; r < n; ++r) offset_.push_back(offset_.back() + counts_[size_t(r)]);
    start_shared(weight);
    return;
  }
  ws.send.resize(total * es);
  ws.recv.resize(piece_ * size_t(n) * es);
  pack(wire_, buf_, weight, ws.send.data(), ws.tmp);
  std::vector<size_t> send_bytes(static_cast<size_t>(n));
  std::vector<size_t> recv_bytes(static_cast<size_t>(n), piece_ * es);
  for (int r = 0; r < n; ++r) send_bytes[size_t(r)] = counts_[size_t(r)] * es;
  req_ = g.ialltoallv(ws.send, send_bytes, ws.recv, recv_bytes);
}

// This rank's contribution to every other rank's piece, weighted and narrowed as start() packs it
// for the wire, into this rank's region at the piece's place (its own piece is read from buf
// when it is summed); then the flag says so.
void PendingReduce::start_shared(float weight) {
  const int n = g_->size(), me = g_->rank();
  const size_t es = traits(wire_).bits / 8;
  const size_t need = counts_.empty() ? piece_ * size_t(n) * es : total_ * es;
  if (shared_->size() < need) {
    throw std::logic_error("PendingReduce: the shared memory is smaller than the reduction");
  }
  weight_ = weight;
  use_ = ++shared_->uses;
  std::byte* mine = shared_->region(me);
  size_t sent = 0;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const size_t lo = offset_[size_t(r)], count = offset_[size_t(r) + 1] - lo;
    pack_range(wire_, buf_, lo, count, weight, mine + lo * es, ws_->tmp);
    // Counted as the transport counts it (the all-to-all's pieces include the padding).
    sent += (counts_.empty() ? piece_ : count) * es;
  }
  shared_->post(2 * use_ - 1, sent);
}

// The owner's sum of its piece, from buf (its own contribution, weighted and rounded as start()
// would have put it on the wire) and the other ranks' regions, in rank order, in fp32; the
// rounded sum goes into buf and, for the all-gather's readers, into this rank's region.
void PendingReduce::scatter_sum_shared() {
  const int n = g_->size(), me = g_->rank();
  const size_t es = traits(wire_).bits / 8;
  for (int r = 0; r < n; ++r) {
    if (r != me) shared_->wait(r, 2 * use_ - 1);
  }
  ReduceWorkspace& ws = *ws_;
  constexpr size_t kChunk = 2048;
  ws.acc.resize(kChunk);
  ws.tmp.resize(2 * kChunk);
  ws.recv.resize(kChunk * es);
  float* acc = ws.acc.data();
  float* own = ws.tmp.data();
  float* wide = ws.tmp.data() + kChunk;
  std::byte* scratch = ws.recv.data();
  std::byte* mine = shared_->region(me);
  const size_t lo = offset_[size_t(me)], count = offset_[size_t(me) + 1] - lo;
  for (size_t i = 0; i < count; i += kChunk) {
    const size_t m = std::min(kChunk, count - i);
    for_range(buf_, lo + i, m, [&](std::span<float> part, size_t at) {
      for (size_t k = 0; k < part.size(); ++k) own[at + k] = part[k] * weight_;
    });
    if (wire_ != DType::fp32) {
      convert_f32_to(wire_, std::span<const float>(own, m), scratch, kNearest);
      convert_to_f32(wire_, scratch, std::span<float>(own, m));
    }
    for (int r = 0; r < n; ++r) {
      const float* x =
          r == me ? own : widened(wire_, shared_->region(r) + (lo + i) * es, m, wide);
      add_in_rank_order(acc, x, m, r);
    }
    std::byte* out = counts_.empty() ? mine + (lo + i) * es : scratch;
    convert_f32_to(wire_, std::span<const float>(acc, m), out, kNearest);
    unpack(wire_, out, buf_, lo + i, m);
  }
  phase_ = Phase::gather;
  // The all-gather's bytes, as the transport counts them; to owners, nothing more is sent (the
  // flag then only says that this rank has read the others' regions).
  shared_->post(2 * use_, counts_.empty() ? piece_ * size_t(n - 1) * es : 0);
}

void PendingReduce::scatter_sum() {
  if (!active() || phase_ == Phase::gather) return;
  if (shared_) {
    scatter_sum_shared();
    return;
  }
  ReduceWorkspace& ws = *ws_;
  g_->wait(req_);
  const int n = g_->size(), me = g_->rank();
  const size_t es = traits(wire_).bits / 8;
  // Piece rank() of every rank, in rank order. After the all-to-all of start() this rank's own
  // piece is still in send, where the reduced piece is also written and all-gathered in place
  // (process_group.h): no copy of it is made. The reduction to owners has every piece in recv.
  std::byte* own = counts_.empty() ? ws.send.data() + size_t(me) * piece_ * es : nullptr;
  auto piece_of = [&](int r) -> const std::byte* {
    return own && r == me ? own : ws.recv.data() + size_t(r) * piece_ * es;
  };
  std::byte* out = own ? own : ws.recv.data();
  // Summed in fp32, rank 0 first (add_in_rank_order), in L1-sized chunks; a chunk's inputs are
  // all read before its sum is written over one of them.
  constexpr size_t kChunk = 2048;
  ws.acc.resize(kChunk);
  ws.tmp.resize(kChunk);
  float* acc = ws.acc.data();
  for (size_t i = 0; i < piece_; i += kChunk) {
    const size_t m = std::min(kChunk, piece_ - i);
    for (int r = 0; r < n; ++r) {
      add_in_rank_order(acc, widened(wire_, piece_of(r) + i * es, m, ws.tmp.data()), m, r);
    }
    convert_f32_to(wire_, std::span<const float>(acc, m), out + i * es, kNearest);
  }
  std::span<std::byte> mine(out, piece_ * es);
  phase_ = Phase::gather;
  if (!counts_.empty()) {
    // To owners: the rounded sum is this rank's piece of buf; nothing more goes on the wire.
    size_t off = 0;
    for (int r = 0; r < me; ++r) off += counts_[size_t(r)];
    unpack(wire_, mine.data(), buf_, off, piece_);
    return;
  }
  req_ = g_->iallgather(mine, bytes_of(ws.send));
}

bool PendingReduce::test() {
  if (!active()) return true;
  if (phase_ != Phase::gather) return false;
  if (shared_) {
    for (int r = 0; r < g_->size(); ++r) {
      if (r != g_->rank() && !shared_->ready(r, 2 * use_)) return false;
    }
    return true;
  }
  return g_->test(req_);
}

void PendingReduce::finish() {
  if (!active()) return;
  scatter_sum();
  if (shared_) {
    // The other ranks' sums, read from their regions (to owners: only that they have read this
    // rank's region, which the next reduction overwrites).
    const size_t es = traits(wire_).bits / 8;
    for (int r = 0; r < g_->size(); ++r) {
      if (r == g_->rank()) continue;
      shared_->wait(r, 2 * use_);
      if (!counts_.empty()) continue;
      const size_t lo = offset_[size_t(r)];
      unpack(wire_, shared_->region(r) + lo * es, buf_, lo, offset_[size_t(r) + 1] - lo);
    }
    shared_ = nullptr;
  } else {
    g_->wait(req_);
    if (counts_.empty()) {
      unpack(wire_, ws_->send.data(), buf_, 0, total_);  // the padding is not read
    }
  }
  counts_.clear();
  buf_.clear();
  g_ = nullptr;
  ws_ = nullptr;
}

}  // namespace mixp::dist
