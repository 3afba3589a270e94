// ZeRO stage 3 (docs/distributed.md, "ZeRO stage 3: --zero 3"): the parameters are sharded
// across the ranks too. Internal to the Trainer (trainer.cpp, trainer_step.cpp).
//
// Every trainable parameter is split along dim 0 into one piece per rank (DataParallel's
// row_piece: torch.chunk's split, as FSDP2 shards each parameter). A rank keeps its pieces as
// tensors of their own (pieces()): the Trainer's optimizer steps them (their fp32 masters, with
// the optimizer state), and their gradients are this rank's rows of the reduced gradients
// (DataParallel::shard_gradient_rows). The model's parameters themselves hold no bytes between
// uses, on any rank. The model is cut into units, as FSDP's auto-wrap policy cuts it: every
// child of a Sequential (a GPT's transformer blocks) is a unit, every embedding and LM head
// outside them (modules of kind "embedding" and "head") is one (as FSDP wraps the embeddings on
// their own), a head whose weight is an embedding's (GPT-2's tied wte) joining that
// embedding's unit, and the root module holds the rest (the final norm). A unit is gathered
// around each use: the tied wte for the embedding's forward, then for the head's forward and
// again for the head's backward, freed in between (its gradient accumulates both uses before
// its reduction); an embedding's backward reads only the ids and gathers nothing.
//   - forward: a forward wrapper (nn::Module::set_forward_wrapper, chained to the recipe's)
//     gathers the unit's parameters just before its forward (each rank broadcasts its pieces of
//     the unit, packed; 16-bit on the wire with a bf16/fp16 wire, else in the storage dtype:
//     an all-gather), and frees them after it. The root stays gathered from its forward to the
//     end of its backward (FSDP keeps the root unsharded after forward, since its backward
//     comes first);
//   - backward: a backward pre-hook on the unit's output (autograd/backward_pre_hook.h) gathers
//     them again before the unit's backward; the grad-ready hook (autograd/grad_ready_hook.h)
//     frees them once backward has finished the gradients of all of them, or, for an embedding's
//     or a head's unit, a backward pre-hook on the module's input once backward has passed
//     through the module (a tied weight's gradient is finished only at the step's last node);
//   - a plain Linear head's forward gathers only the weight's 16-bit copy when autocast would
//     read nothing else (forward_copy_only, amp::autocast_reads_shadow);
//   - a tied head's weight gradient (GPT-2's wte) is computed when backward reaches the token
//     embedding rather than at the head's backward (ops/deferred_weight_grad.h), so that the
//     whole [vocab, C] fp32 gradient does not live at the head's backward, where the step's
//     memory peaks; the same GEMM, and it reaches the weight's gradient before the embedding's
//     rows are added, as without ZeRO: the same values, bit for bit;
//   - the gradients are reduce-scattered by rows (DataParallel::shard_gradient_rows);
//   - prefetch (on by default, --zero3-prefetch): the broadcasts run on a thread of their own
//     (zero3_prefetch.h), and each gather starts the next one's, the unit that followed it the
//     last time (forward: the next block; backward: the previous one), so that its transfer
//     overlaps this unit's compute (FSDP's forward_prefetch/backward_prefetch); the guesses
//     are kept per use of a unit (the tied wte's three gathers each have their own). The same bytes
//     arrive and are unpacked at the same moment as without it: the same results, bit for bit.
// With a 16-bit wire every rank computes with the values rounded to the wire format (FSDP's
// MixedPrecision(param_dtype=bf16)), its own rows too: they are unpacked from what it sent. The
// gathered values live in the parameter's own dtype (fp32 buffers); under autocast the unit's
// 16-bit weight copies (which autograd saves for its backward) are freed with it and, before
// its backward, gathered alone (docs/distributed.md, "What is gathered when").
// Parameters in device memory (a GPU's, the guarded test device's) go through a buffer in that
// memory, packed and unpacked by backend copy kernels, over the device's group (NCCL for cuda),
// without prefetch: the same bytes and values as in host memory.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/dist/grad_reduce.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"
#include "mixp/ops/deferred_weight_grad.h"
#include "mixp/train/data_parallel.h"
#include "zero3_prefetch.h"

namespace mixp::train {

class Zero3 {
 public:
  // `params`: the trainable parameters (in the Trainer's order) with their names. Makes this
  // rank's pieces (copies of its rows) and installs the forward wrappers; the parameters stay
  // whole until release_all, which takes this rank's rows of them into its pieces again (so that
  // a checkpoint can still be loaded into them). `prefetch`: gathers on a thread of their own,
  // the next unit's started before this one computes (collective: the group is duplicated;
  // without MPI_THREAD_MULTIPLE the gathers stay blocking, prefetching() says which).
  Zero3(DataParallel& dp, nn::Module& model, const nn::NamedTensors& params, dist::GradComm wire,
        bool prefetch = true);
  ~Zero3();  // puts the modules' previous wrappers back
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  // This rank's rows of each parameter (row_piece), a leaf tensor of its own in the parameter's
  // dtype; undefined where it holds none. The optimizer's parameters.
  const std::vector<Tensor>& pieces() const { return pieces_; }
  // Where each piece starts in its parameter's elements (row_piece's elem0).
  std::vector<uint64_t> piece_offsets() const;

  // Frees every parameter's bytes (after a gather_all, or at the start, this rank's rows are
  // first copied into its pieces): before a step, and before the optimizer step. Local: no
  // communication.
  void release_all();
  // Every parameter whole on every rank (collective): for a checkpoint, evaluation, the replicas'
  // check; the wrappers do nothing until release_all.
  void gather_all();
  // The pieces changed (the optimizer stepped): the next gather sends new values.
  void parameters_updated() { ++generation_; }
  // Installs, for one backward, the grad-ready hook that frees each unit after its backward
  // (chained after the hook already installed on this thread: data parallelism's).
  std::unique_ptr<GradReadyHookScope> backward_scope();
  // Parameter bytes this rank has sent since it was made (its pieces, to N-1 ranks, at each
  // gather).
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Of them, the bytes sent through the data-parallel group itself (counted in its CommStats):
  // all of them without prefetch, only gather_all's with it.
  uint64_t group_bytes_sent() const { return group_bytes_sent_; }
  // Milliseconds the training thread spent in the gathers of units (packing, the transfer or
  // the wait for it, unpacking) and, of them, waiting for the prefetch thread.
  // Of gather_ms, packing this rank's pieces and unpacking every rank's.
  double gather_ms() const { return gather_ms_; }
  double wait_ms() const { return wait_ms_; }
  double pack_ms() const { return pack_ms_; }
  double unpack_ms() const { return unpack_ms_; }
  bool prefetching() const { return thread_ != nullptr; }
  // Units gathered since this object was made, and of them the gathers a prefetch had started
  // (the guess was right).
  uint64_t gathers() const { return gathers_; }
  uint64_t prefetched() const { return prefetched_; }
  // Of the gathers, the forward_copy_only ones; and the tied head weight gradients computed when
  // backward reached the token embedding (counted by the backward, on the training thread).
  uint64_t copy_only_gathers() const { return copy_only_gathers_; }
  uint64_t deferred_grads() const { return *deferred_grads_; }
  // The largest size of the units gathered at once since reset_gathered_peak (the whole units'
  // parameters in their storage dtype, this rank's rows included): the tied embedding is not
  // held across the blocks.
  uint64_t gathered_peak_bytes() const { return gathered_peak_; }
  void reset_gathered_peak() { gathered_peak_ = gathered_now_; }
  // Units (the root included) and, per step without accumulation or recomputation, how many
  // parameter bytes this rank sends: the arithmetic of docs/distributed.md.
  size_t units() const { return units_.size(); }
  uint64_t expected_bytes_per_step() const;

 private:
  struct Param {
    Tensor t;
    size_t unit = 0;
    // Autocast's 16-bit copy of the gathered values (the weight shadow the forward made and
    // autograd saved for the backward), its bytes freed in place between the unit's forward and
    // backward and made again from the re-gathered values; dropped when the values change.
    Tensor shadow;
    uint64_t generation = 0;  // generation_ at its last gather
    bool exact = false;       // its last gather was gather_all's (the stored values, not rounded)
  };
  struct Unit {
    std::vector<size_t> params;
    uint64_t bytes = 0;  // its parameters in their storage dtype (gathered_peak_bytes)
    int gathers_per_step = 0;  // without accumulation or recomputation (expected_bytes_per_step)
    bool root = false;
    bool gathered = false;
    bool copies_only = false;  // gathered for its backward: the autocast copies, not the values
    size_t ready = 0;  // parameters whose gradient this backward has finished
  };
  // A module that computes with a unit's parameters (the tied wte's unit has two: the token
  // embedding and the head).
  struct Use {
    nn::Module* module = nullptr;
    nn::Module::ForwardWrapper previous;
    size_t unit = 0;
    bool backward_reads = true;  // its backward reads the parameters (an Embedding's does not)
    // Freed when backward has passed through the module (a pre-hook on its input), not when its
    // unit's gradients are all finished: an embedding's or head's unit.
    bool release_after_backward = false;
    // A tied head's weight gradient deferred (ops/deferred_weight_grad.h) to the moment backward
    // reaches the token embedding: set on the embedding's use (which delivers it, with_grad_for)
    // and on the head's (whose linear stashes it).
    bool delivers_head_grad = false;
    bool defers_weight_grad = false;
    // A head that is a plain Linear of one weight (no forward implementation, no branch): under
    // autocast with weight shadows its forward reads only the weight's 16-bit copy, so only that
    // is gathered for it (forward_copy_only).
    nn::Linear* linear_head = nullptr;
  };
  Tensor forward(size_t use, nn::Module& self, const Tensor& x);
  void gather(size_t use, bool backward = false);
  // Whether use `k`'s forward gather fills only its weight's autocast copy (Use::linear_head,
  // amp::autocast_reads_shadow): the [vocab, C] fp32 values of GPT-2's tied head are then never
  // whole at the head's forward, where they would sit beside its copy and the logits.
  bool forward_copy_only(size_t k) const;
  void release(Unit& u);
  // The parameters `which` from every rank's pieces: one broadcast per rank, its pieces packed.
  // exact: in the storage dtype, whatever the wire.
  // backward: the gather before a unit's backward, which needs only the autocast copies of the
  // parameters that have one (see unpack).
  void gather_params(std::span<const size_t> which, bool exact, bool backward = false);
  // The bytes of each rank's pieces of `which` on the wire, by rank.
  std::vector<size_t> owner_bytes(std::span<const size_t> which, bool exact) const;
  // This rank's pieces of `which`, packed at the wire's format into `dst`.
  void pack(std::span<const size_t> which, bool exact, std::byte* dst);
  // Every rank's pieces of `which` from `wire` (rank r's packed part at wire + at[r], ranks in
  // order, `bytes` from owner_bytes) into the parameters.
  void unpack(std::span<const size_t> which, bool exact, bool backward, const std::byte* wire,
              std::span<const size_t> bytes);
  // Prefetch: starts unit `unit`'s gather on the thread (packs this rank's part now).
  void submit(size_t unit);
  // Waits for the gather in flight; unpacks it when `use` (else drops it: a wrong guess).
  void finish_pending(bool use, bool backward);
  void release_param(Param& p);
  // This rank's rows of the whole parameters into its pieces (after gather_all, a resume's
  // load, or at the start).
  void take_pieces();
  // After a gather: the autocast copy saved in this unit's forward, made again in place.
  void restore_shadow(Param& p);
  void on_grad_ready(const Tensor& leaf);
  DType wire_dtype(const Param& p) const;

  DataParallel& dp_;
  dist::GradComm wire_;
  std::vector<Param> params_;
  std::vector<Tensor> pieces_;  // per parameter: this rank's rows (undefined: none)
  std::vector<Unit> units_;
  std::vector<Use> uses_;
  std::unordered_map<const TensorImpl*, size_t> index_;  // parameter by its TensorImpl
  bool full_ = true;    // every parameter whole (gather_all, or not yet released)
  uint64_t generation_ = 0;  // optimizer steps taken (parameters_updated)
  bool copy_only_ = false;   // the gather in progress is a forward_copy_only one
  uint64_t bytes_sent_ = 0;
  uint64_t group_bytes_sent_ = 0;
  double gather_ms_ = 0, wait_ms_ = 0, pack_ms_ = 0, unpack_ms_ = 0;
  uint64_t gathers_ = 0, prefetched_ = 0, copy_only_gathers_ = 0;
  // Shared with the deferred gradients' closures, which the autograd graph may hold past a step.
  std::shared_ptr<uint64_t> deferred_grads_ = std::make_shared<uint64_t>(0);
  uint64_t gathered_now_ = 0, gathered_peak_ = 0;
  std::vector<std::byte> wire_buf_;
  // The parameters' device; host_: plain host memory (cpu), where the gathers pack and unpack
  // with memcpy and convert_f32_to; elsewhere (a GPU's, the guarded test device's) with backend
  // copy kernels, through wire_dev_, a buffer in that memory, and group_: the group that moves
  // that memory (dist::group_for: NCCL for cuda).
  Device device_ = Device::cpu();
  bool host_ = true;
  dist::ProcessGroup* group_ = nullptr;
  Tensor wire_dev_;
  // Prefetch: the gather in flight (into prefetch_buf_, every owner's part in rank order), the
  // thread (declared after the buffer: it is joined before the buffer goes) and, per gather
  // (use * 2 + backward), the one that followed it the last time.
  std::vector<std::byte> prefetch_buf_;
  std::unique_ptr<GatherThread> thread_;
  struct Pending {
    bool active = false;
    size_t unit = 0;
    uint64_t ticket = 0;
    uint64_t generation = 0;
    std::vector<size_t> bytes;  // by owner
  } pending_;
  std::unordered_map<size_t, size_t> next_;
  // Per unit: the tied head's deferred weight gradient of the forward in progress, made at the
  // token embedding's forward and filled by the head's.
  std::unordered_map<size_t, std::shared_ptr<DeferredWeightGrad>> deferred_;
  size_t last_key_ = SIZE_MAX;  // the previous gather since release_all
};

}  // namespace mixp::train
