// Zero3 (trainer_zero3.h): ZeRO stage 3, parameters gathered per unit around its forward and
// backward, freed in between.
#include "trainer_zero3.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "mixp/amp/autocast.h"
#include "mixp/amp/weight_shadow.h"
#include "mixp/autograd/backward_pre_hook.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/node.h"
#include "mixp/format/convert.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/allocator.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/train_config.h"
#include "device_grad_reduce.h"

namespace mixp::train {
namespace {

constexpr ConvertOptions kNearest{.round = Round::nearest_even, .overflow = Overflow::ieee};

// A Storage's bytes given back to its allocator, the Storage kept (its size, version and
// allocator; every tensor that views it loses them too), as FSDP's storage().resize_(0).
void free_bytes(Storage& st) {
  if (st.data) st.allocator->deallocate({st.data, st.block_size}, st.nbytes);
  st.data = nullptr;
  st.block_size = 0;
}

// Bytes again for a Storage that free_bytes emptied.
void alloc_bytes(Storage& st) {
  if (st.data) return;
  const CachingAllocator::Block b = st.allocator->allocate(st.nbytes);
  st.data = b.ptr;
  st.block_size = b.size;
}

// Device memory (a GPU's, the guarded test device's): the host code's memcpy and conversions as
// backend copy kernels (nearest even, IEEE overflow: convert_f32_to's kNearest and autocast's
// kShadowRound/kShadowOverflow alike), which, like a memcpy, leave the destination's version
// alone (the callers bump it where the host code does).
//   `count` elements of dtype `dt` at `p` in `dev`'s memory (a part of the wire buffer);
Tensor wire_view(std::byte* p, size_t count, DType dt, Device dev) {
  return from_blob(p, {int64_t(count)}, dt, dev);
}
//   elements [e0, e0 + count) of a contiguous tensor's storage, flat;
Tensor flat_part(const Tensor& t, size_t e0, size_t count) {
  return t.detach().view({t.numel()}).slice(0, int64_t(e0), int64_t(e0 + count));
}
//   dst <- src, converted.
void device_copy(Tensor dst, const Tensor& src) {
  backend_for(dst, src).copy(dst, src);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Adds the time from its making to its end to `ms`, when `on`.
struct AddElapsed {
  double& ms;
  bool on = true;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~AddElapsed() {
    if (on) ms += ms_since(t0);
  }
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 &&
         s[prefix.size()] == '.';
}

}  // namespace

Zero3::Zero3(DataParallel& dp, nn::Module& model, const nn::NamedTensors& params,
             dist::GradComm wire, bool prefetch)
    : dp_(dp), wire_(wire) {
  if (!params.empty()) device_ = params[0].second.device();
  host_ = device_.is_cpu();
  // The group that moves the parameters' memory (collective: every rank asks at the same point).
  group_ = &dp_.memory_group(device_);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, t] = params[i];
    if (!(t.device() == device_)) {
      throw ConfigError(fmt::format("--zero 3: parameter '{}' is on {} but '{}' on {}", name,
                                    t.device().str(), params[0].first, device_.str()));
    }
    if (!t.is_contiguous() || t.storage_offset() != 0 || t.storage()->nbytes != t.nbytes() ||
        !t.storage()->owned || !t.storage()->allocator) {
      throw std::logic_error("ZeRO 3 needs each parameter in a storage of its own: " + name);
    }
    Param p;
    p.t = t;
    params_.push_back(std::move(p));
    index_[t.impl()] = i;
    // This rank's rows: a leaf of its own, which the optimizer steps (take_pieces fills it).
    const RowPiece rp = row_piece(t.shape(), dp_.size(), dp_.rank());
    Tensor piece;
    if (rp.numel > 0) {
      Shape shape = t.shape();
      if (shape.size() > 0) shape[0] = rp.rows;
      piece = Tensor::empty(shape, TensorOptions{.dtype = t.dtype(), .device = t.device()});
      piece.requires_grad_();
    }
    pieces_.push_back(piece);
  }
  take_pieces();
  // The uses, in module order: the root; every child of a Sequential not inside another use
  // (FSDP's transformer auto-wrap: a GPT's blocks); every embedding and head outside those (FSDP
  // wraps the embeddings on their own).
  auto add_use = [&](nn::Module* m, bool backward_reads, bool release_after_backward) {
    Use& use = uses_.emplace_back();
    use.module = m;
    use.backward_reads = backward_reads;
    use.release_after_backward = release_after_backward;
  };
  add_use(&model, true, false);
  std::vector<std::string> names{""};
  auto inside = [&](const std::string& name) {
    for (size_t k = 1; k < names.size(); ++k) {
      if (starts_with(name, names[k])) return true;
    }
    return false;
  };
  for (auto& [name, m] : model.named_modules()) {
    if (m->kind() != "sequential" || inside(name)) continue;
    for (auto& [child, c] : m->named_children()) {
      names.push_back(name.empty() ? child : name + "." + child);
      add_use(c.get(), true, false);
    }
  }
  for (auto& [name, m] : model.named_modules()) {
    const bool embedding = m->kind() == "embedding";
    if ((!embedding && m->kind() != "head") || name.empty() || inside(name)) continue;
    names.push_back(name);
    add_use(m, /*backward_reads=*/!embedding, true);  // an Embedding's backward reads the ids
  }
  // The units: the root's, then one per use, or the unit its parameters already belong to (a
  // tied head: its weight is the embedding's, one TensorImpl). The parameters of no use stay in
  // the root's.
  units_.emplace_back().root = true;
  std::vector<size_t> unit_of(params_.size(), 0);
  for (size_t k = 1; k < uses_.size(); ++k) {
    std::vector<size_t> mine;
    size_t shared = 0;
    for (const auto& [pname, t] : uses_[k].module->named_parameters()) {
      const auto it = index_.find(t.impl());
      if (it == index_.end()) continue;  // frozen: not sharded
      if (unit_of[it->second] != 0) {
        if (shared != 0 && shared != unit_of[it->second]) {
          throw std::logic_error("ZeRO 3: module '" + names[k] +
                                 "' shares parameters with two units");
        }
        shared = unit_of[it->second];
      } else {
        mine.push_back(it->second);
      }
    }
    if (shared != 0 && !mine.empty()) {
      throw std::logic_error("ZeRO 3: module '" + names[k] +
                             "' has parameters of its own besides another unit's");
    }
    uses_[k].unit = shared != 0 ? shared : units_.size();
    if (shared == 0) units_.emplace_back();
    for (size_t i : mine) unit_of[i] = uses_[k].unit;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.unit = unit_of[i];
    Unit& u = units_[p.unit];
    u.params.push_back(i);
    u.bytes += uint64_t(p.t.nbytes());
  }
  // A tied head: a unit of one parameter used by an embedding and by a head that reads it in
  // backward (GPT-2's wte). Its weight gradient is deferred to the embedding's backward.
  for (size_t e = 1; e < uses_.size(); ++e) {
    if (uses_[e].backward_reads || units_[uses_[e].unit].params.size() != 1) continue;
    for (size_t h = 1; h < uses_.size(); ++h) {
      if (h == e || uses_[h].unit != uses_[e].unit || !uses_[h].backward_reads) continue;
      uses_[e].delivers_head_grad = true;
      uses_[h].defers_weight_grad = true;
    }
  }
  for (size_t h = 1; h < uses_.size(); ++h) {
    auto* lin = dynamic_cast<nn::Linear*>(uses_[h].module);
    const Unit& u = units_[uses_[h].unit];
    if (lin && uses_[h].module->kind() == "head" && u.params.size() == 1 &&
        params_[u.params[0]].t.impl() == lin->weight().impl()) {
      uses_[h].linear_head = lin;
    }
  }
  units_[0].gathers_per_step = 1;  // kept from its forward to the end of its backward
  for (size_t k = 1; k < uses_.size(); ++k) {
    units_[uses_[k].unit].gathers_per_step += uses_[k].backward_reads ? 2 : 1;
  }
  for (size_t k = 0; k < uses_.size(); ++k) {
    Use& use = uses_[k];
    use.previous = use.module->forward_wrapper();
    use.module->set_forward_wrapper(
        [this, k](nn::Module& self, const Tensor& x) { return forward(k, self, x); });
  }
  if (prefetch && host_) {
    // Collective (every rank makes its Zero3 at the same point); null without
    // MPI_THREAD_MULTIPLE, on every rank: the gathers stay blocking. Device memory's gathers
    // stay blocking too (NCCL's group has no duplicate; the GPU's would overlap on a stream of
    // their own, not a thread).
    if (auto g = dp_.group().duplicate()) thread_ = std::make_unique<GatherThread>(std::move(g));
  }
}

Zero3::~Zero3() {
  if (thread_ && pending_.active) {
    try {
      thread_->wait(pending_.ticket);  // its buffer goes with this object
    } catch (...) {  // an error already reported on the way here
    }
  }
  for (Use& use : uses_) use.module->set_forward_wrapper(use.previous);
}

DType Zero3::wire_dtype(const Param& p) const {
  // fp32 parameters go 16-bit on a bf16/fp16 wire; others (bf16-pure's) as they are stored.
  if (p.t.dtype() != DType::fp32) return p.t.dtype();
  if (wire_ == dist::GradComm::bf16) return DType::bf16;
  if (wire_ == dist::GradComm::fp16) return DType::fp16;
  return DType::fp32;
}

Tensor Zero3::forward(size_t k, nn::Module& self, const Tensor& x) {
  const Use& use = uses_[k];
  auto run = [&](const Tensor& in) {
    return use.previous ? use.previous(self, in) : self.forward(in);
  };
  if (full_) return run(x);
  Unit& u = units_[use.unit];
  // A forward inside the unit's backward (a checkpointed block's recomputation) needs the values
  // themselves, which the backward's gather left out.
  if (u.gathered && u.copies_only) release(u);
  gather(k);
  Tensor in = x;
  if (use.release_after_backward && use.backward_reads && GradMode::is_enabled() &&
      x.requires_grad()) {
    // Freed once backward has passed through the module: its input's gradient is made by the
    // node that also makes the weights' (a tied wte's is finished only at the embedding).
    const size_t unit = use.unit;
    in = with_backward_pre_hook(x, [this, unit] { release(units_[unit]); });
  }
  Tensor y;
  {
    // The tied head: its linear stashes its weight gradient in the deferral the embedding's
    // forward made (ops/deferred_weight_grad.h).
    std::optional<DeferWeightGradScope> defer;
    if (use.defers_weight_grad && GradMode::is_enabled()) {
      if (auto it = deferred_.find(use.unit); it != deferred_.end() && it->second)
        defer.emplace(params_[u.params[0]].t, std::move(it->second));
    }
    y = run(in);
  }
  const bool backward = GradMode::is_enabled() && y.defined() && y.requires_grad();
  if (u.root && backward) return y;  // kept until its backward has finished (on_grad_ready)
  release(u);
  if (use.delivers_head_grad && backward) {
    // When backward reaches the token embedding's output, the head's weight gradient is computed
    // and given to the tied weight, before the embedding adds its rows (autograd/
    // backward_pre_hook.h with_grad_for): the order the head's own backward would have given.
    auto d = std::make_shared<DeferredWeightGrad>();
    deferred_[use.unit] = d;
    const Tensor w = params_[u.params[0]].t;
    y = with_grad_for(y, w, [d, w, count = deferred_grads_] {
      Tensor g = d->compute();
      if (g.defined()) ++*count;
      const DType gd = grad_dtype_for(w.dtype());
      if (g.defined() && g.dtype() != gd) g = g.to(gd);  // as the weight's cast node widens it
      return g;
    });
  }
  if (!backward || !use.backward_reads) return y;
  if (thread_ && !pending_.active) {
    // The use's own backward gather comes next (the last block's: the head computes in between;
    // the head's: the loss): its transfer can start now, as it was released.
    const auto it = next_.find(k * 2);
    if (it != next_.end() && it->second == k * 2 + 1) submit(use.unit);
  }
  return with_backward_pre_hook(y, [this, k] { gather(k, /*backward=*/true); });
}

bool Zero3::forward_copy_only(size_t k) const {
  const Use& use = uses_[k];
  if (!use.linear_head || use.linear_head->forward_impl() || use.linear_head->has_branch())
    return false;
  const Param& p = params_[units_[use.unit].params[0]];
  // The copy is made from the wire's values: fp32 ones, or 16-bit ones of its own dtype.
  const DType wd = wire_dtype(p);
  if (wd != DType::fp32 && wd != amp::autocast_dtype()) return false;
  return amp::autocast_reads_shadow(OpId::linear, p.t);
}

void Zero3::gather(size_t k, bool backward) {
  const size_t unit = uses_[k].unit;
  Unit& u = units_[unit];
  if (u.gathered || full_) return;
  const auto t0 = std::chrono::steady_clock::now();
  copy_only_ = !backward && forward_copy_only(k);
  if (copy_only_) ++copy_only_gathers_;
  struct Reset {
    bool& b;
    ~Reset() { b = false; }
  } reset{copy_only_};
  if (!thread_) {
    gather_params(u.params, /*exact=*/false, backward);
  } else {
    // The gather in flight is this unit's (the guess was right), or it is waited for and dropped
    // (every rank guessed the same, so every rank drops it) and this one runs now.
    if (pending_.active && (pending_.unit != unit || pending_.generation != generation_)) {
      finish_pending(/*use=*/false, backward);
    }
    if (pending_.active) {
      ++prefetched_;
    } else {
      submit(unit);
    }
    finish_pending(/*use=*/true, backward);
    // The next guess: the gather that followed this use's the last time (the next block in the
    // forward, the previous one in the backward, the root after the first block's backward
    // with accumulation), started now so that it moves while this unit computes. The same
    // state on every rank, so the same guess. Nothing is learned across release_all: the
    // optimizer step changes the values in between.
    const size_t key = k * 2 + (backward ? 1 : 0);
    if (last_key_ != SIZE_MAX) next_[last_key_] = key;
    last_key_ = key;
    const auto it = next_.find(key);
    if (it != next_.end()) {
      const size_t n = uses_[it->second / 2].unit;
      if (n != unit && !units_[n].gathered) submit(n);
    }
  }
  gather_ms_ += ms_since(t0);
  ++gathers_;
  u.gathered = true;
  u.copies_only = backward;
  u.ready = 0;
  gathered_now_ += u.bytes;
  gathered_peak_ = std::max(gathered_peak_, gathered_now_);
}

void Zero3::release(Unit& u) {
  if (!u.gathered) return;
  for (size_t k : u.params) release_param(params_[k]);
  u.gathered = false;
  gathered_now_ -= u.bytes;
}

void Zero3::gather_params(std::span<const size_t> which, bool exact, bool backward) {
  // One broadcast per rank: its pieces of `which`, packed in order at the wire's format (an
  // all-gather), into one buffer, ranks in order.
  dist::ProcessGroup& g = *group_;
  const int me = dp_.rank();
  const std::vector<size_t> bytes = owner_bytes(which, exact);
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::byte* buf = nullptr;
  if (host_) {
    wire_buf_.resize(total);
    buf = wire_buf_.data();
  } else {
    // In the device's memory, kept and grown to the largest gather (as wire_buf_).
    if (!wire_dev_.defined() || size_t(wire_dev_.numel()) < total) {
      wire_dev_ = Tensor();
      wire_dev_ = Tensor::empty({int64_t(std::max<size_t>(total, 1))},
                                TensorOptions{.dtype = DType::uint8, .device = device_});
    }
    buf = detail::transport_bytes(wire_dev_).data();
  }
  size_t at = 0;
  for (int r = 0; r < dp_.size(); ++r) {
    const size_t b = bytes[size_t(r)];
    if (b == 0) continue;  // the same on every rank: nothing of r's here
    const std::span<std::byte> part(buf + at, b);
    if (r == me) {
      pack(which, exact, part.data());
      bytes_sent_ += b * size_t(dp_.size() - 1);
      group_bytes_sent_ += b * size_t(dp_.size() - 1);
    }
    g.broadcast(part, r);
    at += b;
  }
  unpack(which, exact, backward, buf, bytes);
}

std::vector<size_t> Zero3::owner_bytes(std::span<const size_t> which, bool exact) const {
  std::vector<size_t> bytes(size_t(dp_.size()), 0);
  for (size_t k : which) {
    const Param& p = params_[k];
    const size_t es = traits(exact ? p.t.dtype() : wire_dtype(p)).storage_bytes;
    for (int r = 0; r < dp_.size(); ++r)
      bytes[size_t(r)] += size_t(row_piece(p.t.shape(), dp_.size(), r).numel) * es;
  }
  return bytes;
}

void Zero3::pack(std::span<const size_t> which, bool exact, std::byte* dst) {
  const AddElapsed timed{pack_ms_, !exact};  // the units' gathers (gather_all's are exact)
  size_t at = 0;
  for (size_t k : which) {
    const Param& p = params_[k];
    const Tensor& piece = pieces_[k];
    if (!piece.defined()) continue;
    const DType wd = exact ? p.t.dtype() : wire_dtype(p);
    const size_t n = size_t(piece.numel());
    if (!host_) {
      device_copy(wire_view(dst + at, n, wd, device_), piece.detach().view({piece.numel()}));
    } else if (wd == piece.dtype()) {
      std::memcpy(dst + at, piece.data_ptr(), piece.nbytes());
    } else {
      convert_f32_to(wd, std::span<const float>(piece.data<float>(), n), dst + at, kNearest);
    }
    at += n * size_t(traits(wd).storage_bytes);
  }
}

void Zero3::unpack(std::span<const size_t> which, bool exact, bool backward,
                   const std::byte* wire, std::span<const size_t> bytes) {
  const AddElapsed timed{unpack_ms_, !exact};  // the units' gathers (gather_all's are exact)
  const int n = dp_.size();
  // Each rank's part starts where the ranks before it end; a cursor per rank.
  std::vector<const std::byte*> src(static_cast<size_t>(n));
  size_t start = 0;
  for (int r = 0; r < n; ++r) {
    src[size_t(r)] = wire + start;
    start += bytes[size_t(r)];
  }
  for (size_t k : which) {
    Param& p = params_[k];
    const DType wd = exact ? p.t.dtype() : wire_dtype(p);
    const size_t es = traits(wd).storage_bytes;
    const bool convert = wd != p.t.dtype();
    const bool same = p.generation == generation_ && !exact && !p.exact;
    // Every rank's rows of p, in rank order, through `write(rows' first element, count, src)`.
    auto each_piece = [&](auto write) {
      for (int r = 0; r < n; ++r) {
        const RowPiece rp = row_piece(p.t.shape(), n, r);
        if (rp.numel == 0) continue;
        write(size_t(rp.elem0), size_t(rp.numel), src[size_t(r)]);
        src[size_t(r)] += size_t(rp.numel) * es;
      }
    };
    // Every rank's rows into `copy`'s bytes, a 16-bit autocast copy of p: the wire's values when
    // they are of its dtype, else fp32 ones rounded as autocast rounds them.
    auto fill_copy = [&](const Tensor& copy) {
      Storage& cs = *copy.impl()->storage;
      alloc_bytes(cs);
      const size_t ce = copy.element_size();
      auto* dst = static_cast<std::byte*>(cs.data);
      each_piece([&](size_t e0, size_t count, const std::byte* from) {
        if (!host_) {
          device_copy(flat_part(copy, e0, count),
                      wire_view(const_cast<std::byte*>(from), count, wd, device_));
        } else if (wd == copy.dtype()) {
          std::memcpy(dst + e0 * ce, from, count * ce);
        } else {
          convert_f32_to(copy.dtype(),
                         std::span<const float>(reinterpret_cast<const float*>(from), count),
                         dst + e0 * ce, {.round = kShadowRound, .overflow = kShadowOverflow});
        }
      });
    };
    // New values (an optimizer step, or the stored values after rounded ones): a new version, so
    // that no copy made from the old ones (an autocast cache entry) is reused; the same values
    // again within a step keep it.
    const bool new_values = p.generation != generation_ || p.exact != exact;
    if (backward && same && p.shadow.defined() &&
        (wd == p.shadow.dtype() || wd == DType::fp32)) {
      // The gather before the unit's backward: the forward's autocast copy is what its
      // backward reads (the GEMMs saved it, linalg_ops.cpp keep_w), not the fp32 values, so
      // only the copy gets bytes, straight from the wire (the same bits: the wire's 16-bit
      // values are the copy's, or the fp32 values rounded as autocast rounds them). The
      // parameter's own Storage stays empty until the next forward: a unit's backward holds 2
      // bytes a GEMM weight value, not 4 + 2.
      fill_copy(p.shadow);
      amp::weight_shadows().attach(p.t, p.shadow);  // current at the storage's version now
      continue;
    }
    if (copy_only_ && !exact && !backward) {
      // A head's forward that reads only the weight's autocast copy (forward_copy_only): the
      // copy is made straight from the wire, as autocast would make it from the gathered
      // values (the same bits), and attached as the weight's shadow, which autocast then uses;
      // the fp32 values stay unallocated.
      const DType sd = amp::autocast_dtype();
      Tensor sh = p.shadow.defined() && p.shadow.dtype() == sd
                      ? p.shadow
                      : Tensor::empty(p.t.shape(), TensorOptions{.dtype = sd, .device = p.t.device()});
      fill_copy(sh);
      if (new_values) p.t.impl()->storage->version.fetch_add(1);
      p.generation = generation_;
      p.exact = false;
      p.shadow = sh;
      amp::weight_shadows().attach(p.t, sh);
      continue;
    }
    // The bytes come back into the same Storage (the views autograd saved in the forward, a
    // Linear's detached weight, see them again), as FSDP resizes a parameter's storage. This
    // rank's own rows too, from what it sent: with a 16-bit wire every rank computes with the
    // same rounded values.
    Storage& st = *p.t.impl()->storage;
    alloc_bytes(st);
    auto* dst = static_cast<std::byte*>(st.data);
    const size_t pe = p.t.element_size();
    each_piece([&](size_t e0, size_t count, const std::byte* from) {
      if (!host_) {
        device_copy(flat_part(p.t, e0, count),
                    wire_view(const_cast<std::byte*>(from), count, wd, device_));
      } else if (convert) {
        convert_to_f32(wd, from, std::span<float>(reinterpret_cast<float*>(dst) + e0, count));
      } else {
        std::memcpy(dst + e0 * pe, from, count * pe);
      }
    });
    if (new_values) st.version.fetch_add(1);
    p.generation = generation_;
    p.exact = exact;
    if (!same) p.shadow = Tensor();  // new values: autocast casts them afresh
    restore_shadow(p);
  }
}

void Zero3::submit(size_t unit) {
  const Unit& u = units_[unit];
  Pending& pd = pending_;
  pd.bytes = owner_bytes(u.params, /*exact=*/false);
  size_t total = 0, mine = 0;
  for (int r = 0; r < dp_.size(); ++r) {
    if (r == dp_.rank()) mine = total;
    total += pd.bytes[size_t(r)];
  }
  prefetch_buf_.resize(total);
  // This rank's part packed now, on the training thread: the optimizer writes the pieces, which
  // the other thread must not race with.
  pack(u.params, /*exact=*/false, prefetch_buf_.data() + mine);
  bytes_sent_ += pd.bytes[size_t(dp_.rank())] * size_t(dp_.size() - 1);
  std::vector<GatherThread::Piece> pieces;
  size_t at = 0;
  for (int r = 0; r < dp_.size(); ++r) {
    const size_t b = pd.bytes[size_t(r)];
    if (b > 0) pieces.push_back({std::span<std::byte>(prefetch_buf_.data() + at, b), r});
    at += b;
  }
  pd.ticket = thread_->submit(std::move(pieces));
  pd.unit = unit;
  pd.generation = generation_;
  pd.active = true;
}

void Zero3::finish_pending(bool use, bool backward) {
  Pending& pd = pending_;
  if (!pd.active) return;
  pd.active = false;
  const auto t0 = std::chrono::steady_clock::now();
  thread_->wait(pd.ticket);
  wait_ms_ += ms_since(t0);
  if (!use) return;
  unpack(units_[pd.unit].params, /*exact=*/false, backward, prefetch_buf_.data(), pd.bytes);
}

void Zero3::restore_shadow(Param& p) {
  if (!p.shadow.defined()) return;
  TensorImpl* ti = p.t.impl();
  // The same bits autocast made from these values in the forward (its rounding is
  // kShadowRound/kShadowOverflow, backend.h), into the Storage autograd saved.
  Storage& sh = *p.shadow.impl()->storage;
  alloc_bytes(sh);
  if (!host_) {
    device_copy(p.shadow.detach(), p.t.detach());
    amp::weight_shadows().attach(p.t, p.shadow);
    return;
  }
  convert_f32_to(p.shadow.dtype(),
                 std::span<const float>(static_cast<const float*>(ti->storage->data),
                                        size_t(p.t.numel())),
                 sh.data, {.round = kShadowRound, .overflow = kShadowOverflow});
  amp::weight_shadows().attach(p.t, p.shadow);
}

void Zero3::release_param(Param& p) {
  TensorImpl* ti = p.t.impl();
  // Autocast's 16-bit copy of the gathered values (a weight shadow, amp/weight_shadow.h):
  // autograd saved it for the unit's backward, so dropping the shadow alone would keep its bytes
  // until then (a block's GEMM weights at 2 bytes a value, for every block between its forward
  // and backward).
  // Its bytes are freed in place like the parameter's, and made again at the next gather of the
  // same values (restore_shadow).
  if (Tensor sh = amp::weight_shadows().current(p.t);
      sh.defined() && sh.dtype() != DType::fp32 && sh.impl()->storage->owned &&
      sh.impl()->storage->allocator) {
    p.shadow = sh;
    free_bytes(*sh.impl()->storage);
  }
  amp::weight_shadows().drop(ti);
  // The bytes freed in place: every view of the parameter (what autograd saved in the forward)
  // loses them too, as FSDP's storage.resize_(0); a use while freed reads a null pointer rather
  // than stale values. The Storage keeps its size, version and allocator for the next gather.
  free_bytes(*ti->storage);
}

void Zero3::take_pieces() {
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor& piece = pieces_[k];
    const Tensor& t = params_[k].t;
    if (!piece.defined() || !t.impl()->storage->data) continue;
    const RowPiece rp = row_piece(t.shape(), dp_.size(), dp_.rank());
    if (!host_) {
      device_copy(piece.detach().view({piece.numel()}),
                  flat_part(t, size_t(rp.elem0), size_t(rp.numel)));
      piece.bump_version();
      continue;
    }
    const size_t es = t.element_size();
    std::memcpy(piece.data_ptr(), static_cast<const std::byte*>(t.data_ptr()) + rp.elem0 * es,
                piece.nbytes());
    piece.bump_version();
  }
}

std::vector<uint64_t> Zero3::piece_offsets() const {
  std::vector<uint64_t> out;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (pieces_[k].defined())
      out.push_back(uint64_t(row_piece(params_[k].t.shape(), dp_.size(), dp_.rank()).elem0));
  }
  return out;
}

void Zero3::release_all() {
  // Whole parameters (gather_all's exact values, a resume's load, the start): this rank's rows
  // are what its pieces hold from now on.
  if (full_) take_pieces();
  // Every parameter (releasing a released one does nothing): a backward gather leaves a
  // parameter's own bytes empty and only its autocast copy filled.
  for (Param& p : params_) release_param(p);
  for (Unit& u : units_) u.gathered = false;
  gathered_now_ = 0;
  full_ = false;
  // A prefetch still in flight (a guess past the last gather) is dropped: the owners' values
  // may change before the next use.
  finish_pending(/*use=*/false, false);
  last_key_ = SIZE_MAX;
}

void Zero3::gather_all() {
  if (full_) return;
  release_all();
  // The values as they are stored (a checkpoint saves the masters; an evaluation computes with
  // them, as without ZeRO), whatever the wire.
  std::vector<size_t> all(params_.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;
  gather_params(all, /*exact=*/true);
  full_ = true;
}

std::unique_ptr<GradReadyHookScope> Zero3::backward_scope() {
  GradReadyHook previous;
  if (const GradReadyHook* h = mixp::detail::grad_ready_hook()) previous = *h;
  return std::make_unique<GradReadyHookScope>([this, previous](const Tensor& leaf) {
    if (previous) previous(leaf);
    on_grad_ready(leaf);
  });
}

void Zero3::on_grad_ready(const Tensor& leaf) {
  const auto it = index_.find(leaf.impl());
  if (it == index_.end() || full_) return;
  Unit& u = units_[params_[it->second].unit];
  if (u.gathered && ++u.ready == u.params.size()) release(u);
}

uint64_t Zero3::expected_bytes_per_step() const {
  uint64_t total = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const Param& p = params_[k];
    const uint64_t b = uint64_t(pieces_[k].defined() ? pieces_[k].numel() : 0) *
                       traits(wire_dtype(p)).storage_bytes;
    total += b * uint64_t(units_[p.unit].gathers_per_step) * uint64_t(dp_.size() - 1);
  }
  return total;
}

}  // namespace mixp::train
