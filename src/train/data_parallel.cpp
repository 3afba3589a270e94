// DataParallel (data_parallel.h): the Trainer's side of a multi-process run.
#include "mixp/train/data_parallel.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <span>
#include <string>
#include <nlohmann/json.hpp>

#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/node.h"
#include "mixp/format/convert.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/train/train_config.h"
#include "device_grad_reduce.h"

namespace mixp::train {
namespace {

constexpr ConvertOptions kNearest{.round = Round::nearest_even, .overflow = Overflow::ieee};


uint64_t fnv1a(const std::byte* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint64_t(p[i])) * 1099511628211ull;
  return h;
}

// The keys whose values differ between two configuration objects, "key is a here but b on rank 0".
std::string differences(const nlohmann::json& mine, const nlohmann::json& root) {
  std::vector<std::string> keys;
  for (auto it = root.begin(); it != root.end(); ++it) keys.push_back(it.key());
  for (auto it = mine.begin(); it != mine.end(); ++it) {
    if (!root.contains(it.key())) keys.push_back(it.key());
  }
  std::string out;
  int shown = 0;
  for (const std::string& k : keys) {
    const auto a = mine.find(k);
    const auto b = root.find(k);
    if (a != mine.end() && b != root.end() && *a == *b) continue;
    if (shown++ == 3) return out + ", ...";
    out += fmt::format("{}{} is {} here but {} on rank 0", out.empty() ? "" : ", ", k,
                       a == mine.end() ? "the default" : a->dump(),
                       b == root.end() ? "the default" : b->dump());
  }
  return out;
}

void broadcast_tensors(const DataParallel& dp, const nn::NamedTensors& named) {
  for (const auto& [name, t] : named) {
    if (!t.is_contiguous()) {
      throw std::logic_error("data parallelism needs contiguous parameters and buffers: " + name);
    }
    dp.memory_group(t.device()).broadcast(detail::transport_bytes(t), 0);
    t.bump_version();
  }
}

// t's gradient, to be overwritten: a missing or strided one is first replaced by a contiguous
// one of `dtype` on t's device.
Tensor writable_grad(const Tensor& t, DType dtype) {
  Tensor g = t.grad();
  if (!g.defined() || !g.is_contiguous()) {
    g = Tensor::empty(t.shape(), TensorOptions{.dtype = dtype, .device = t.device()});
    const_cast<Tensor&>(t).set_grad(g);
  }
  return g;
}

// The fp32 sum at `sum` (t's numel values) into t's gradient (writable_grad), rounded to its
// dtype (nearest even).
Tensor write_sum(const Tensor& t, DType dtype, const float* sum) {
  Tensor g = writable_grad(t, dtype);
  convert_f32_to(g.dtype(), std::span<const float>(sum, size_t(t.numel())), g.data_ptr(),
                 kNearest);
  return g;
}

// write_sum for gradients in device memory: `sum` (t's numel values in the wire format, on t's
// device) into t's gradient, converted to its dtype (nearest even; exact from a wire format no
// wider than it). The same values as write_sum of the widened sum.
void write_sum_on_device(const Tensor& t, DType dtype, const Tensor& sum) {
  // copy_ bumps the version, as write_sum's caller does.
  writable_grad(t, dtype).view({t.numel()}).copy_(sum);
}

}  // namespace

DataParallel::DataParallel(dist::ProcessGroup& group, const DataParallelOptions& o)
    : group_(group),
      opts_(o),
      overlap_state_(o.reentrant_backward ? Overlap::learning : Overlap::on) {
  if (!(o.bucket_mb > 0)) {
    throw ConfigError(fmt::format("--bucket-mb must be positive, got {:g}", o.bucket_mb));
  }
}

DataParallel::~DataParallel() {
  amp::set_fp8_amax_reducer({});
  optim::set_step_reducer(optim::StepValue::found_inf, {});
}

void DataParallel::install_step_reducers(bool sharded) {
  dist::ProcessGroup* g = &group_;
  amp::set_fp8_amax_reducer([g](std::span<float> amax) {
    std::vector<double> v(amax.begin(), amax.end());
    g->allreduce(v, dist::ReduceOp::max);
    for (size_t i = 0; i < v.size(); ++i) amax[i] = float(v[i]);
  });
  if (sharded) {
    // Each rank unscales only its own gradients: the skip decision is or-ed over the ranks, as
    // PyTorch's ShardedGradScaler all-reduces found_inf with MAX. The gradient norm is not
    // reduced this way (a sum of per-rank sums would differ from the unsharded norm in its last
    // bits): the Trainer asks sharded_grad_norm instead.
    optim::set_step_reducer(optim::StepValue::found_inf,
                            [g](optim::StepValue, std::span<double> v) {
                              g->allreduce(v, dist::ReduceOp::max);
                            });
  }
}

RowPiece row_piece(const Shape& shape, int ranks, int rank) {
  const int64_t d0 = shape.size() == 0 ? 1 : shape[0];
  int64_t numel = 1;
  for (int i = 0; i < int(shape.size()); ++i) numel *= shape[i];
  const int64_t per = ranks > 0 ? (d0 + ranks - 1) / ranks : d0;
  RowPiece p;
  p.row0 = std::min(d0, per * rank);
  p.rows = std::min(d0, p.row0 + per) - p.row0;
  const int64_t row_elems = d0 > 0 ? numel / d0 : 0;
  p.elem0 = p.row0 * row_elems;
  p.numel = p.rows * row_elems;
  return p;
}

double DataParallel::row_sharded_grad_norm(std::span<const Tensor> pieces) {
  const size_t n = pieces.size();
  std::vector<double> mine(n, 0.0);
  for (size_t k = 0; k < n; ++k) {
    if (pieces[k].defined()) mine[k] = optim::grad_sum_squares(pieces[k]);
  }
  std::vector<double> all(n * size_t(size()), 0.0);
  group_.allgather(std::as_bytes(std::span<const double>(mine)),
                   std::as_writable_bytes(std::span<double>(all)));
  double sq = 0.0;
  for (size_t k = 0; k < n; ++k) {
    for (size_t r = 0; r < size_t(size()); ++r) sq += all[r * n + k];
  }
  return std::sqrt(sq);
}

double DataParallel::sharded_grad_norm(std::span<const Tensor> params,
                                       const std::vector<int>& owner) {
  std::vector<double> terms(params.size(), 0.0);
  for (size_t i = 0; i < params.size(); ++i) {
    if (owner[i] == rank()) terms[i] = optim::grad_sum_squares(params[i]);
  }
  // Every term comes from one rank, zeros from the others: the sum over ranks is exact.
  group_.allreduce(terms, dist::ReduceOp::sum);
  double sq = 0.0;
  for (double t : terms) sq += t;
  return std::sqrt(sq);
}

int DataParallel::count_hosts() {
  return int(ranks_per_host().size());
}

std::vector<std::pair<std::string, int>> DataParallel::ranks_per_host() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) name.fill('\0');
  name.back() = '\0';  // a name cut at the buffer's end is not terminated
  std::vector<std::byte> all(name.size() * size_t(size()));
  group_.allgather(std::as_bytes(std::span<const char>(name)), all);
  std::vector<std::pair<std::string, int>> hosts;
  for (size_t r = 0; r < size_t(size()); ++r) {
    const std::string h(reinterpret_cast<const char*>(all.data() + r * name.size()));
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& e) { return e.first == h; });
    if (it == hosts.end()) {
      hosts.emplace_back(h, 1);
    } else {
      ++it->second;
    }
  }
  return hosts;
}

std::string DataParallel::shared_memory_off_reason(int hosts) const {
  if (shared_memory_reduction() || size() <= 1) return "";
  if (device_path_) {
    return fmt::format("the gradients are in {} memory: {} reduces them there",
                       params_.empty() ? "device" : params_[0].device().str(),
                       grads_group_->backend_name());
  }
  // The shared-memory reduction needs every rank to map every other rank's region
  // (src/dist/mpi_group.cpp, init_shared_memory): with ranks on several hosts it is off for all
  // of them, and MPI carries every byte -- between the ranks of one host over its own
  // shared-memory transport (vader), across hosts over TCP.
  if (hosts > 1) return fmt::format("ranks on {} hosts: MPI carries the gradients", hosts);
  if (opts_.grad_comm == dist::GradComm::bf16_ring) return "bf16-ring runs over MPI";
  const char* env = std::getenv("MIXP_SHARED_MEMORY");
  if (env && std::string(env) == "0") return "MIXP_SHARED_MEMORY=0";
  return "the ranks could not map shared memory (/dev/shm)";
}

void DataParallel::check_same_config(const std::string& config_json) {
  const auto* text = reinterpret_cast<const std::byte*>(config_json.data());
  const std::vector<std::byte> root =
      broadcast_bytes(std::vector<std::byte>(text, text + config_json.size()), 0);
  const std::string root_json(reinterpret_cast<const char*>(root.data()), root.size());
  std::string diff;
  if (root_json != config_json) {
    diff = differences(nlohmann::json::parse(config_json), nlohmann::json::parse(root_json));
    if (diff.empty()) diff = "the configurations differ";
  }
  std::vector<double> bad{diff.empty() ? 0.0 : 1.0};
  group_.allreduce(bad, dist::ReduceOp::sum);
  if (bad[0] == 0) return;
  if (!diff.empty()) {
    throw ConfigError(fmt::format(
        "rank {} of {} was started with another configuration than rank 0: {}. Every rank of a "
        "data-parallel run must get the same model, precision, seed and data",
        rank(), size(), diff));
  }
  throw ConfigError(fmt::format(
      "{:g} rank(s) were started with another configuration than rank 0 (their own messages say "
      "how); every rank of a data-parallel run must get the same model, precision, seed and data",
      bad[0]));
}

void DataParallel::broadcast_parameters(nn::Module& model) {
  broadcast_tensors(*this, model.named_parameters());
  broadcast_buffers(model);
}

void DataParallel::broadcast_buffers(nn::Module& model) {
  broadcast_tensors(*this, model.named_buffers());
}

void DataParallel::layout(std::span<const Tensor> params) {
  if (!buckets_.empty() && params.size() == bucket_of_.size() &&
      (params.empty() || index_.count(params[0].impl()))) {
    return;
  }
  buckets_.clear();
  // Where the gradients live decides how they are reduced (device_reduction()); the parameters
  // of one run share a device (ops refuse mixed devices).
  const Device dev = params.empty() ? Device::cpu() : params[0].device();
  device_path_ = !dev.is_cpu();
  grads_group_ = &memory_group(dev);
  const size_t cap = std::max<size_t>(1, size_t(opts_.bucket_mb * 1024 * 1024 / sizeof(float)));
  // DDP's first bucket is small (1 MiB), so that the first reduction starts early in backward.
  const size_t first_cap = std::min<size_t>(cap, 1024 * 1024 / sizeof(float));
  bucket_of_.assign(params.size(), 0);
  index_.clear();
  // Parameters in reverse order: backward produces the last layer's gradients first (DDP's
  // bucket order).
  size_t i = params.size();
  while (i > 0) {
    const size_t limit = buckets_.empty() ? first_cap : cap;
    Bucket b;
    size_t j = i;
    while (j > 0 && (b.elems == 0 || b.elems + size_t(params[j - 1].numel()) <= limit)) {
      b.elems += size_t(params[--j].numel());
    }
    for (size_t k = j; k < i; ++k) bucket_of_[k] = buckets_.size();
    if (rows_) {
      for (size_t k = i; k-- > j;) b.order.push_back(k);
      b.counts.assign(size_t(size()), 0);
      for (int r = 0; r < size(); ++r) {
        for (size_t k = j; k < i; ++k)
          b.counts[size_t(r)] += size_t(row_piece(params[k].shape(), size(), r).numel);
      }
    } else if (grad_owner_.empty()) {
      for (size_t k = i; k-- > j;) b.order.push_back(k);
    } else {
      b.counts.assign(size_t(size()), 0);
      for (int r = 0; r < size(); ++r) {
        for (size_t k = i; k-- > j;) {
          if (grad_owner_[k] != r) continue;
          b.order.push_back(k);
          b.counts[size_t(r)] += size_t(params[k].numel());
        }
      }
    }
    buckets_.push_back(std::move(b));
    i = j;
  }
  for (size_t k = 0; k < params.size(); ++k) index_[params[k].impl()] = k;
  // Ranks on one machine reduce through memory they all map (grad_reduce.h): mapped here, once,
  // in bucket order on every rank (map_shared is a collective).
  if (size() > 1 && opts_.grad_comm != dist::GradComm::bf16_ring && !device_path_) {
    for (Bucket& b : buckets_) {
      b.shared = group_.map_shared(dist::PendingReduce::shared_bytes(
          b.elems, size(), opts_.grad_comm, /*to_owners=*/!b.counts.empty()));
    }
  }
}

void DataParallel::shard_gradients(std::vector<int> owner) {
  grad_owner_ = std::move(owner);
  buckets_.clear();  // laid out again, grouped by owner
}

void DataParallel::shard_gradient_rows(std::vector<Tensor> pieces) {
  row_pieces_ = std::move(pieces);
  rows_ = true;
  grad_owner_.clear();
  buckets_.clear();  // laid out again, with each rank's rows
}

void DataParallel::begin_gradients(std::span<const Tensor> params, double weight) {
  layout(params);
  params_ = params;
  weight_ = float(weight);
  bytes0_ = group_.stats().bytes_sent;
  grads_bytes0_ = grads_group_->stats().bytes_sent;
  next_ = 0;
  late_ = false;
  completed_.assign(params.size(), 0);
  for (Bucket& b : buckets_) b.waiting = int(b.order.size());
  if (opts_.overlap && overlap_state_ != Overlap::off) {
    hook_ = std::make_unique<GradReadyHookScope>([this](const Tensor& t) { on_grad_ready(t); });
  }
}

void DataParallel::on_grad_ready(const Tensor& leaf) {
  const auto it = index_.find(leaf.impl());
  if (it == index_.end()) return;  // not a parameter (e.g. a checkpointed segment's input)
  const size_t k = it->second;
  if (completed_[k]++ > 0) {
    if (bucket_of_[k] < next_) late_ = true;
    return;
  }
  --buckets_[bucket_of_[k]].waiting;
  if (overlap_state_ != Overlap::on) return;  // the first step only watches
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) start_next_bucket();
  progress();
}

// Starts bucket next_. The previous bucket's all-gather is started first, so that every rank
// starts the collectives in the same order: all-to-all 0, all-gather 0, all-to-all 1, ...
void DataParallel::start_next_bucket() {
  if (device_path_) {
    // Device memory: the whole reduction now (it blocks), so that ZeRO 2 and 3 drop the other
    // ranks' gradients during backward, as the host path does.
    reduce_bucket_on_device(buckets_[next_++]);
    return;
  }
  if (next_ > 0) buckets_[next_ - 1].reduce.scatter_sum();
  Bucket& b = buckets_[next_++];
  if (free_.empty()) {
    pool_.push_back(std::make_unique<dist::ReduceWorkspace>());
    free_.push_back(pool_.back().get());
  }
  b.work = free_.back();
  free_.pop_back();
  if (rows_) {
    start_rows(b);
    return;
  }
  // fp32 contiguous gradients are reduced where they are; the others (16-bit, strided, absent:
  // zeros) are widened into the workspace first and rounded back by write_back.
  b.staged.assign(b.order.size(), -1);
  size_t staged = 0;
  for (size_t i = 0; i < b.order.size(); ++i) {
    const Tensor g = params_[b.order[i]].grad();
    if (g.defined() && g.dtype() == DType::fp32 && g.is_contiguous()) continue;
    b.staged[i] = int64_t(staged);
    staged += size_t(params_[b.order[i]].numel());
  }
  std::vector<float>& flat = b.work->flat;
  flat.resize(staged);
  dist::Segments segs;
  segs.reserve(b.order.size());
  for (size_t i = 0; i < b.order.size(); ++i) {
    const Tensor g = params_[b.order[i]].grad();
    const size_t m = size_t(params_[b.order[i]].numel());
    if (b.staged[i] < 0) {
      segs.emplace_back(g.data<float>(), m);
      continue;
    }
    const std::span<float> dst(flat.data() + b.staged[i], m);
    if (g.defined()) {
      const Tensor c = g.contiguous();
      convert_to_f32(c.dtype(), c.data_ptr(), dst);
    } else {
      std::fill(dst.begin(), dst.end(), 0.0f);
    }
    segs.push_back(dst);
  }
  if (b.counts.empty()) {
    b.reduce.start(group_, std::move(segs), weight_, opts_.grad_comm, *b.work, b.shared.get());
  } else {
    b.reduce.start_to_owners(group_, std::move(segs), b.counts, weight_, opts_.grad_comm,
                             *b.work, b.shared.get());
    // ZeRO 2: the gradients other ranks own are on their way to them; drop this rank's copies.
    for (size_t k : b.order) {
      if (grad_owner_[k] != rank()) const_cast<Tensor&>(params_[k]).set_grad(Tensor());
    }
  }
  if (!b.reduce.active()) write_back(b);  // finished inside start (one rank, or the ring)
}

// ZeRO 3 (shard_gradient_rows): the bucket's gradients reduce-scattered by rows. Each rank's
// rows of each parameter go to it, ranks in order (start_to_owners' layout); the other ranks'
// rows are read where they are (start_to_owners copies them out before it returns), this rank's
// are copied into the workspace, where their sum lands, so that every whole gradient can be
// dropped at once. 16-bit, strided or absent (zeros) gradients are widened into the workspace
// whole first, as without ZeRO.
void DataParallel::start_rows(Bucket& b) {
  const int n = size(), me = rank();
  b.staged.assign(b.order.size(), -1);
  std::vector<int64_t> whole(b.order.size(), -1);  // offset of a gradient widened whole
  size_t staged = 0;
  for (size_t i = 0; i < b.order.size(); ++i) {
    const Tensor& p = params_[b.order[i]];
    const Tensor g = p.grad();
    if (!(g.defined() && g.dtype() == DType::fp32 && g.is_contiguous())) {
      whole[i] = int64_t(staged);
      staged += size_t(p.numel());
    }
  }
  for (size_t i = 0; i < b.order.size(); ++i) {
    const RowPiece own = row_piece(params_[b.order[i]].shape(), n, me);
    if (own.numel == 0) continue;
    if (whole[i] >= 0) {
      b.staged[i] = whole[i] + own.elem0;
    } else {
      b.staged[i] = int64_t(staged);
      staged += size_t(own.numel);
    }
  }
  std::vector<float>& flat = b.work->flat;
  flat.resize(staged);
  for (size_t i = 0; i < b.order.size(); ++i) {
    const Tensor& p = params_[b.order[i]];
    const Tensor g = p.grad();
    if (whole[i] >= 0) {
      const std::span<float> dst(flat.data() + whole[i], size_t(p.numel()));
      if (g.defined()) {
        const Tensor c = g.contiguous();
        convert_to_f32(c.dtype(), c.data_ptr(), dst);
      } else {
        std::fill(dst.begin(), dst.end(), 0.0f);
      }
    } else if (b.staged[i] >= 0) {
      const RowPiece own = row_piece(p.shape(), n, me);
      const float* src = g.data<float>() + own.elem0;
      std::copy(src, src + own.numel, flat.data() + b.staged[i]);
    }
  }
  dist::Segments segs;
  segs.reserve(b.order.size() * size_t(n));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < b.order.size(); ++i) {
      const Tensor& p = params_[b.order[i]];
      const RowPiece pc = row_piece(p.shape(), n, r);
      if (pc.numel == 0) continue;
      float* at = r == me          ? flat.data() + b.staged[i]
                  : whole[i] >= 0 ? flat.data() + whole[i] + pc.elem0
                                  : p.grad().data<float>() + pc.elem0;
      segs.emplace_back(at, size_t(pc.numel));
    }
  }
  b.reduce.start_to_owners(group_, std::move(segs), b.counts, weight_, opts_.grad_comm, *b.work,
                           b.shared.get());
  // Every whole gradient is on its way (or summed, one rank): this rank keeps only its rows.
  for (size_t k : b.order) const_cast<Tensor&>(params_[k]).set_grad(Tensor());
  if (!b.reduce.active()) write_back(b);
}

// Writes back the buckets whose all-gather has completed (never blocks).
void DataParallel::progress() {
  for (size_t k = 0; k < next_; ++k) {
    Bucket& b = buckets_[k];
    if (b.work && b.reduce.gathering() && b.reduce.test()) write_back(b);
  }
}

void DataParallel::write_back(Bucket& b) {
  b.reduce.finish();  // fp32 gradients hold their sums now
  const std::vector<float>& flat = b.work->flat;
  if (rows_) {
    // This rank's rows of each parameter, summed in the workspace, into its piece's gradient.
    for (size_t i = 0; i < b.order.size(); ++i) {
      const Tensor& piece = row_pieces_[b.order[i]];
      if (b.staged[i] < 0 || !piece.defined()) continue;
      // A new gradient gets the dtype autograd gives the whole parameter's (fp32 for bf16
      // leaves, autograd/node.h), so that the optimizer reads what it reads without ZeRO.
      write_sum(piece, grad_dtype_for(piece.dtype()), flat.data() + b.staged[i]).bump_version();
    }
    free_.push_back(b.work);
    b.work = nullptr;
    return;
  }
  for (size_t i = 0; i < b.order.size(); ++i) {
    const size_t k = b.order[i];
    const Tensor& p = params_[k];
    // ZeRO 2: summed by its owner.
    if (!grad_owner_.empty() && grad_owner_[k] != rank()) continue;
    Tensor g = p.grad();
    if (b.staged[i] >= 0)
      g = write_sum(p, g.defined() ? g.dtype() : p.dtype(), flat.data() + b.staged[i]);
    g.bump_version();
  }
  free_.push_back(b.work);
  b.work = nullptr;
}

void DataParallel::finish_gradients() {
  hook_.reset();
  started_in_backward_ = int(next_);
  if (overlap_state_ == Overlap::learning) {
    // Overlap is safe when backward finishes every parameter at most once (the same on every
    // rank: the graphs are identical).
    bool once = true;
    for (uint8_t c : completed_) once = once && c <= 1;
    overlap_state_ = once ? Overlap::on : Overlap::off;
  }
  if (late_) {  // only set for a bucket already started
    throw std::logic_error(
        "data parallelism: backward finished a parameter's gradient again after its bucket had "
        "been sent (the model's graph changed after the first step); run with --no-comm-overlap");
  }
  while (next_ < buckets_.size()) start_next_bucket();
  for (Bucket& b : buckets_) {
    if (b.work) write_back(b);
  }
  last_bytes_ = group_.stats().bytes_sent - bytes0_;
  if (grads_group_ != &group_) last_bytes_ += grads_group_->stats().bytes_sent - grads_bytes0_;
}

// A bucket of gradients in device memory: one reduce_on_device (device_grad_reduce.h) whose
// values are what start / start_to_owners / start_rows would give: the same contributions in the
// same order, the same pieces to the same ranks. Blocking: it is done on return.
void DataParallel::reduce_bucket_on_device(Bucket& b) {
  const int n = size(), me = rank();
  const Device dev = params_.empty() ? Device::cpu() : params_[0].device();
  // A gradient as a flat tensor (a strided one copied), or undefined (zeros).
  auto flat_grad = [&](size_t k) {
    const Tensor g = params_[k].grad();
    return g.defined() ? g.reshape({params_[k].numel()}) : Tensor();
  };
  std::vector<Tensor> parts;
  std::vector<int64_t> numels;
  if (rows_) {
    // ZeRO 3: rank r's rows of each parameter go to rank r (start_rows' layout).
    {
      std::vector<Tensor> whole;
      for (size_t k : b.order) whole.push_back(flat_grad(k));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < b.order.size(); ++i) {
          const RowPiece pc = row_piece(params_[b.order[i]].shape(), n, r);
          if (pc.numel == 0) continue;
          parts.push_back(whole[i].defined()
                              ? whole[i].slice(0, pc.elem0, pc.elem0 + pc.numel)
                              : Tensor());
          numels.push_back(pc.numel);
        }
      }
    }
    // Every rank keeps only its rows: the whole gradients go as soon as they are packed.
    for (size_t k : b.order) const_cast<Tensor&>(params_[k]).set_grad(Tensor());
    const Tensor sum = detail::reduce_on_device(*grads_group_, std::move(parts), numels, dev,
                                                weight_, opts_.grad_comm, b.counts);
    int64_t at = 0;
    for (size_t k : b.order) {
      const RowPiece own = row_piece(params_[k].shape(), n, me);
      const Tensor& piece = row_pieces_[k];
      if (own.numel > 0 && piece.defined()) {
        write_sum_on_device(piece, grad_dtype_for(piece.dtype()),
                            sum.slice(0, at, at + own.numel));
      }
      at += own.numel;
    }
    return;
  }
  // The dtype each sum is written back in (a gradient's own, else the parameter's); ZeRO 2:
  // the gradients other ranks own go as soon as they are packed.
  std::vector<DType> grad_dtype;
  for (size_t k : b.order) {
    const Tensor g = params_[k].grad();
    parts.push_back(flat_grad(k));
    numels.push_back(params_[k].numel());
    grad_dtype.push_back(g.defined() ? g.dtype() : params_[k].dtype());
    if (!grad_owner_.empty() && grad_owner_[k] != me)
      const_cast<Tensor&>(params_[k]).set_grad(Tensor());
  }
  const Tensor sum = detail::reduce_on_device(*grads_group_, std::move(parts), numels, dev,
                                              weight_, opts_.grad_comm, b.counts);
  int64_t at = 0;
  for (size_t i = 0; i < b.order.size(); ++i) {
    const size_t k = b.order[i];
    // ZeRO 2: the sum holds this rank's parameters only, in bucket order.
    if (!grad_owner_.empty() && grad_owner_[k] != me) continue;
    const int64_t m = params_[k].numel();
    write_sum_on_device(params_[k], grad_dtype[i], sum.slice(0, at, at + m));
    at += m;
  }
}

double DataParallel::comm_ms() const {
  const double own = group_.stats().ms;
  return grads_group_ && grads_group_ != &group_ ? own + grads_group_->stats().ms : own;
}

std::string DataParallel::gradient_transport() const {
  if (shared_memory_reduction()) return "shared memory";
  return (grads_group_ ? grads_group_ : &group_)->backend_name();
}

std::vector<int> DataParallel::partition(std::span<const Tensor> params) const {
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(size_t(size()), 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[size_t(r)] += params[i].numel();
  }
  return owner;
}

void DataParallel::broadcast_from_owners(std::span<const Tensor> params,
                                         const std::vector<int>& owner) {
  for (size_t i = 0; i < params.size(); ++i) {
    memory_group(params[i].device())
        .broadcast(detail::transport_bytes(params[i]), owner[i]);
    params[i].bump_version();
  }
}

std::vector<std::byte> DataParallel::broadcast_bytes(std::vector<std::byte> bytes, int root) {
  std::vector<double> len{rank() == root ? double(bytes.size()) : 0.0};
  group_.allreduce(len, dist::ReduceOp::max);
  bytes.resize(size_t(len[0]));
  group_.broadcast(bytes, root);
  return bytes;
}

void DataParallel::check_replicas(const nn::NamedTensors& params, int64_t step) {
  std::vector<double> mine;
  for (const auto& [name, t] : params) {
    // On the host (a copy of device memory), contiguous.
    const Tensor c = t.to(Device::cpu()).contiguous();
    // The hash's low 52 bits, exact in a double.
    mine.push_back(double(fnv1a(static_cast<const std::byte*>(c.data_ptr()), c.nbytes()) &
                          ((uint64_t(1) << 52) - 1)));
  }
  std::vector<double> lo = mine, hi = mine;
  group_.allreduce(lo, dist::ReduceOp::min);
  group_.allreduce(hi, dist::ReduceOp::max);
  for (size_t k = 0; k < mine.size(); ++k) {
    if (lo[k] == hi[k]) continue;
    throw TrainError(fmt::format(
        "step {}: the replicas have drifted apart: parameter '{}' differs between ranks (its "
        "checksum on rank {} is {}{}). Data-parallel replicas must stay bit-identical; this is a "
        "bug in the run's reductions or a rank with different hardware or library versions",
        step, params[k].first, rank(), mine[k],
        mine[k] == lo[k] ? ", the lowest" : (mine[k] == hi[k] ? ", the highest" : "")));
  }
}

}  // namespace mixp::train
