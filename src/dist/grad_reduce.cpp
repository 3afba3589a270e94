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

DType wire_dtype(GradComm c) {
  switch (c) {
    case GradComm::fp32: return DType::fp32;
    case GradComm::bf16: return DType::bf16;
    case GradComm::fp16: return DType::fp16;
    case GradComm::bf16_ring: return DType::bf16;
  }
  return DType::fp32;
}

std::span<std::byte> bytes_of(std::vector<std::byte>& v) {
  return {v.data(), v.size()};
}

// weight * src, narrowed to `wire` into dst_bits (src.size() elements), in cache-sized chunks so
// that the product never makes a pass of its own over memory.
void scale_into(DType wire, std::span<const float> src, float weight, std::byte* dst_bits,
                std::vector<float>& tmp) {
  constexpr size_t kChunk = 4096;
  const size_t es = traits(wire).bits / 8;
  tmp.resize(kChunk);
  for (size_t i = 0; i < src.size(); i += kChunk) {
    const size_t m = std::min(kChunk, src.size() - i);
    for (size_t k = 0; k < m; ++k) tmp[k] = src[i + k] * weight;
    convert_f32_to(wire, std::span<const float>(tmp.data(), m), dst_bits + i * es, kNearest);
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

int wire_bytes(GradComm c) {
  return traits(wire_dtype(c)).bits / 8;
}

void reduce_weighted_sum(ProcessGroup& g, std::span<float> buf, float weight, GradComm mode,
                         ReduceWorkspace* workspace) {
  ReduceWorkspace local;
  PendingReduce r;
  r.start(g, buf, weight, mode, workspace ? *workspace : local);
  r.finish();
}

// fp32/bf16/fp16: reduce-scatter by all-to-all with the owner summing in fp32 in rank order, then
// all-gather of the rounded sums. Each rank owns `piece` elements; the tail past buf.size() is
// zero padding.
void PendingReduce::start(ProcessGroup& g, std::span<float> buf, float weight, GradComm mode,
                          ReduceWorkspace& ws) {
  if (active()) throw std::logic_error("PendingReduce::start: a reduction is still in flight");
  if (g.size() == 1) {
    if (weight != 1.0f) for (float& x : buf) x *= weight;
    return;
  }
  if (mode == GradComm::bf16_ring) {
    ring_bf16(g, buf, weight, ws);
    return;
  }
  g_ = &g;
  buf_ = buf;
  ws_ = &ws;
  wire_ = wire_dtype(mode);
  phase_ = Phase::scatter;
  const int n = g.size();
  piece_ = (buf.size() + size_t(n) - 1) / size_t(n);
  const size_t es = traits(wire_).bits / 8;
  ws.send.resize(piece_ * size_t(n) * es);
  ws.recv.resize(ws.send.size());
  scale_into(wire_, buf, weight, ws.send.data(), ws.tmp);
  std::fill(ws.send.begin() + std::ptrdiff_t(buf.size() * es), ws.send.end(), std::byte{0});
  req_ = g.ialltoall(ws.send, ws.recv);
}

void PendingReduce::start_to_owners(ProcessGroup& g, std::span<float> buf,
                                    std::span<const size_t> counts, float weight, GradComm mode,
                                    ReduceWorkspace& ws) {
  if (active()) throw std::logic_error("PendingReduce::start: a reduction is still in flight");
  if (mode == GradComm::bf16_ring) {
    throw std::invalid_argument("the reduction to owners (ZeRO 2) has no bf16-ring variant");
  }
  if (g.size() == 1) {
    if (weight != 1.0f) for (float& x : buf) x *= weight;
    return;
  }
  g_ = &g;
  buf_ = buf;
  ws_ = &ws;
  wire_ = wire_dtype(mode);
  phase_ = Phase::scatter;
  counts_.assign(counts.begin(), counts.end());
  const int n = g.size();
  const size_t es = traits(wire_).bits / 8;
  piece_ = counts_[size_t(g.rank())];
  ws.send.resize(buf.size() * es);
  ws.recv.resize(piece_ * size_t(n) * es);
  scale_into(wire_, buf, weight, ws.send.data(), ws.tmp);
  std::vector<size_t> send_bytes(static_cast<size_t>(n));
  std::vector<size_t> recv_bytes(static_cast<size_t>(n), piece_ * es);
  for (int r = 0; r < n; ++r) send_bytes[size_t(r)] = counts_[size_t(r)] * es;
  req_ = g.ialltoallv(ws.send, send_bytes, ws.recv, recv_bytes);
}

void PendingReduce::scatter_sum() {
  if (!active() || phase_ == Phase::gather) return;
  ReduceWorkspace& ws = *ws_;
  g_->wait(req_);
  const int n = g_->size();
  const size_t es = traits(wire_).bits / 8;
  // recv holds piece rank() of every rank, in rank order: sum them in fp32, rank 0 first.
  ws.acc.assign(piece_, 0.0f);
  ws.tmp.resize(piece_);
  for (int r = 0; r < n; ++r) {
    const std::byte* in = ws.recv.data() + size_t(r) * piece_ * es;
    if (wire_ == DType::fp32) {
      const float* x = reinterpret_cast<const float*>(in);
      for (size_t k = 0; k < piece_; ++k) ws.acc[k] += x[k];
    } else {
      convert_to_f32(wire_, in, std::span<float>(ws.tmp.data(), piece_));
      for (size_t k = 0; k < piece_; ++k) ws.acc[k] += ws.tmp[k];
    }
  }
  // The rounded sum of this rank's piece goes to every rank (recv's first piece is free now).
  std::span<std::byte> mine(ws.recv.data(), piece_ * es);
  convert_f32_to(wire_, ws.acc, mine.data(), kNearest);
  phase_ = Phase::gather;
  if (!counts_.empty()) {
    // To owners: the rounded sum is this rank's piece of buf; nothing more goes on the wire.
    size_t off = 0;
    for (int r = 0; r < g_->rank(); ++r) off += counts_[size_t(r)];
    convert_to_f32(wire_, mine.data(), buf_.subspan(off, piece_));
    return;
  }
  req_ = g_->iallgather(mine, bytes_of(ws.send));
}

bool PendingReduce::test() {
  if (!active()) return true;
  return phase_ == Phase::gather && g_->test(req_);
}

void PendingReduce::finish() {
  if (!active()) return;
  scatter_sum();
  g_->wait(req_);
  if (counts_.empty()) {
    convert_to_f32(wire_, ws_->send.data(), buf_);  // the padding past buf.size() is not read
  }
  counts_.clear();
  g_ = nullptr;
  ws_ = nullptr;
}

}  // namespace mixp::dist
