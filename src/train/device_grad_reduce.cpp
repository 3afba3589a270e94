// reduce_on_device (device_grad_reduce.h): dist::PendingReduce's arithmetic in backend ops.
#include "device_grad_reduce.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/format/dtype.h"
#include "mixp/train/train_config.h"

namespace mixp::train::detail {

std::span<std::byte> transport_bytes(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  if (!t.is_contiguous()) throw std::logic_error("transport_bytes: a strided tensor");
  const DeviceAccessScope access;
  return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()};
}

Tensor reduce_on_device(dist::ProcessGroup& g, std::vector<Tensor> parts,
                        std::span<const int64_t> numels, Device device, float weight,
                        dist::GradComm mode, std::span<const size_t> counts) {
  if (mode == dist::GradComm::bf16_ring) {
    throw ConfigError(
        "--grad-comm bf16-ring reduces host memory only (it demonstrates the naive ring's error, "
        "docs/distributed.md); gradients in device memory take fp32, bf16 or fp16");
  }
  const NoGradGuard no_grad;
  const int n = g.size(), me = g.rank();
  int64_t total = 0;
  for (int64_t m : numels) total += m;
  // One rank: the weighted gradients, unrounded (as PendingReduce::start with one rank).
  const DType wd = n == 1 ? DType::fp32 : dist::wire_dtype(mode);
  const size_t es = traits(wd).storage_bytes;
  const bool whole = counts.empty();
  // Pieces: to owners, `counts`; else ceil(total / n) each, the tail zero padding, so that the
  // all-gather has equal pieces.
  std::vector<size_t> piece(static_cast<size_t>(n));
  const size_t even = (size_t(total) + size_t(n) - 1) / size_t(n);
  for (int r = 0; r < n; ++r) piece[size_t(r)] = whole ? even : counts[size_t(r)];
  const int64_t padded = whole ? int64_t(even) * n : total;
  // weight * g in fp32 (one scalar kernel: the product rounded once), then narrowed to the wire
  // format (one convert: nearest even, IEEE overflow), as PendingReduce packs it.
  Tensor send = Tensor::empty({padded}, TensorOptions{.dtype = wd, .device = device});
  int64_t at = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    Tensor dst = send.slice(0, at, at + numels[i]);
    if (parts[i].defined()) {
      dst.copy_(parts[i].reshape({numels[i]}).to(DType::fp32) * double(weight));
    } else {
      dst.zero_();
    }
    parts[i] = Tensor();  // packed: this reference is not needed any more
    at += numels[i];
  }
  if (padded > total) send.slice(0, total, padded).zero_();
  if (n == 1) return send;
  // Each rank's piece from every rank, rank order.
  const size_t mine = piece[size_t(me)];
  Tensor recv = Tensor::empty({int64_t(mine) * n}, TensorOptions{.dtype = wd, .device = device});
  std::vector<size_t> send_bytes(static_cast<size_t>(n)), recv_bytes(static_cast<size_t>(n), mine * es);
  for (int r = 0; r < n; ++r) send_bytes[size_t(r)] = piece[size_t(r)] * es;
  dist::Request req =
      g.ialltoallv(transport_bytes(send), send_bytes, transport_bytes(recv), recv_bytes);
  g.wait(req);
  send = Tensor();  // on the wire and arrived: each buffer goes as soon as it is read
  // The owner's sum in fp32 from +0, ranks in order (add_inplace widens a 16-bit contribution
  // exactly; alpha 1 makes its product exact), rounded once to the wire format.
  Tensor acc = Tensor::empty({int64_t(mine)}, TensorOptions{.dtype = DType::fp32, .device = device});
  acc.zero_();
  for (int r = 0; r < n; ++r) {
    if (mine > 0) acc.add_(recv.slice(0, int64_t(mine) * r, int64_t(mine) * (r + 1)));
  }
  recv = Tensor();
  const Tensor sum = acc.to(wd);
  acc = Tensor();  // the rounded sum is what goes on (acc itself when the wire is fp32)
  if (!whole) return sum;
  // The rounded pieces to every rank (the all-gather in place: this rank's piece is in `out`).
  Tensor out = Tensor::empty({padded}, TensorOptions{.dtype = wd, .device = device});
  Tensor own = out.slice(0, int64_t(mine) * me, int64_t(mine) * (me + 1));
  own.copy_(sum);
  dist::Request gather = g.iallgather(transport_bytes(own), transport_bytes(out));
  g.wait(gather);
  return padded > total ? out.slice(0, 0, total) : out;
}

}  // namespace mixp::train::detail
