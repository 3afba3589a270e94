// Knows which module is running: wraps every module of a model (nn::Module forward wrappers,
// composed with any wrapper a recipe set), so that the inspect tools can say "blocks.3.attn.qkv"
// for a kernel in the forward pass and for the backward of a node that module's forward recorded
// (autograd nodes are numbered in creation order: mixp/autograd/node.h, next_sequence_nr).
//
// The model must outlive the tracker; detach() (or the destructor) puts the previous wrappers
// back. One tracker per model at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixp/nn/module.h"

namespace mixp::inspect {

class ModuleTracker {
 public:
  // Called with each module's output after its forward; returns the output the caller sees
  // (the activation-gradient probe replaces it by a pass-through).
  using OutputFn = std::function<Tensor(const std::string& path, nn::Module& m, Tensor y)>;

  ModuleTracker() = default;
  ~ModuleTracker();
  ModuleTracker(const ModuleTracker&) = delete;
  ModuleTracker& operator=(const ModuleTracker&) = delete;

  // Wraps every module below `root` (the root itself is not: its output is its head's).
  void attach(nn::Module& root, OutputFn on_output = {});
  void detach();

  // The innermost module whose forward is running ("" outside the model).
  std::string current_path() const;
  // The kind of that module ("" outside the model).
  std::string current_kind() const;
  // The innermost module whose forward recorded the node with this sequence number ("" if none
  // since the last clear_nodes()).
  std::string module_of_node(uint64_t sequence_nr) const;
  // Forgets the nodes recorded so far (the trainer calls it once per step).
  void clear_nodes();

 private:
  struct Frame {
    const std::string* path;
    const nn::Module* module;
  };
  struct Interval {
    uint64_t begin, end;  // [begin, end) of node sequence numbers
    size_t depth;
    size_t module;  // index into paths_
  };
  std::vector<std::pair<nn::Module*, nn::Module::ForwardWrapper>> saved_;
  std::vector<std::string> paths_;
  std::vector<Frame> stack_;
  std::vector<Interval> intervals_;
  OutputFn on_output_;
};

}  // namespace mixp::inspect
