// The gradient reductions of grad_reduce.h over a ProcessGroup's all-to-all, all-gather and
// send-receive.
#include "mixp/dist/grad_reduce.h"

#include <fmt/format.h>

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

// Reduce-scatter by all-to-all with the owner summing in fp32 in rank order, then all-gather of
// the rounded sums. `piece` elements per rank; buf is padded to size * piece by the caller.
void scatter_sum_gather(ProcessGroup& g, std::span<float> padded, float weight, DType wire) {
  const int n = g.size();
  const size_t piece = padded.size() / size_t(n);
  const size_t es = traits(wire).bits / 8;
  std::vector<float> scaled(padded.size());
  for (size_t i = 0; i < padded.size(); ++i) scaled[i] = padded[i] * weight;
  std::vector<std::byte> send(padded.size() * es), recv(padded.size() * es);
  convert_f32_to(wire, scaled, send.data(), kNearest);
  g.alltoall(send, recv);
  // recv holds piece rank() of every rank, in rank order: sum them in fp32, rank 0 first.
  std::vector<float> acc(piece, 0.0f), tmp(piece);
  for (int r = 0; r < n; ++r) {
    convert_to_f32(wire, recv.data() + size_t(r) * piece * es, tmp);
    for (size_t k = 0; k < piece; ++k) acc[k] += tmp[k];
  }
  std::vector<std::byte> mine(piece * es);
  convert_f32_to(wire, acc, mine.data(), kNearest);
  g.allgather(mine, bytes_of(send));
  convert_to_f32(wire, send.data(), padded);
}

// The naive ring: reduce-scatter by N-1 hops, each rounding the partial sum to bf16, then an
// all-gather ring of N-1 hops.
void ring_bf16(ProcessGroup& g, std::span<float> padded, float weight) {
  const int n = g.size(), r = g.rank();
  const size_t piece = padded.size() / size_t(n);
  std::vector<uint16_t> bits(padded.size());
  std::vector<float> scaled(padded.size());
  for (size_t i = 0; i < padded.size(); ++i) scaled[i] = padded[i] * weight;
  convert_f32_to(DType::bf16, scaled, bits.data(), kNearest);
  std::vector<uint16_t> incoming(piece);
  std::vector<float> a(piece), b(piece);
  auto chunk = [&](int c) { return bits.data() + size_t(((c % n) + n) % n) * piece; };
  auto as_bytes = [](uint16_t* p, size_t count) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(p), count * 2);
  };
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    g.sendrecv(as_bytes(chunk(r - s), piece), next, as_bytes(incoming.data(), piece), prev);
    uint16_t* own = chunk(r - s - 1);
    convert_to_f32(DType::bf16, incoming.data(), a);
    convert_to_f32(DType::bf16, own, b);
    for (size_t k = 0; k < piece; ++k) a[k] += b[k];
    convert_f32_to(DType::bf16, a, own, kNearest);  // one rounding per hop
  }
  // Rank r now holds the full sum of chunk r + 1; pass the sums around the ring.
  for (int s = 0; s < n - 1; ++s) {
    g.sendrecv(as_bytes(chunk(r + 1 - s), piece), next, as_bytes(chunk(r - s), piece), prev);
  }
  convert_to_f32(DType::bf16, bits.data(), padded);
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

void reduce_weighted_sum(ProcessGroup& g, std::span<float> buf, float weight, GradComm mode) {
  const size_t n = size_t(g.size());
  if (n == 1) {
    if (weight != 1.0f) for (float& x : buf) x *= weight;
    return;
  }
  const size_t piece = (buf.size() + n - 1) / n;
  std::vector<float> padded(piece * n, 0.0f);
  std::memcpy(padded.data(), buf.data(), buf.size_bytes());
  if (mode == GradComm::bf16_ring) {
    ring_bf16(g, padded, weight);
  } else {
    scatter_sum_gather(g, padded, weight, wire_dtype(mode));
  }
  std::memcpy(buf.data(), padded.data(), buf.size_bytes());
}

}  // namespace mixp::dist
