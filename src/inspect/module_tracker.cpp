// ModuleTracker (module_tracker.h): forward wrappers that keep a stack of running modules and the
// node sequence numbers each forward recorded.
#include "mixp/inspect/module_tracker.h"

#include <stdexcept>

#include "mixp/autograd/node.h"

namespace mixp::inspect {

ModuleTracker::~ModuleTracker() {
  detach();
}

void ModuleTracker::attach(nn::Module& root, OutputFn on_output) {
  if (!saved_.empty()) throw std::logic_error("mixp::inspect: the tracker is already attached");
  on_output_ = std::move(on_output);
  const auto mods = root.named_modules();
  paths_.reserve(mods.size());
  for (const auto& [path, m] : mods) paths_.push_back(path);
  for (size_t i = 0; i < mods.size(); ++i) {
    nn::Module* m = mods[i].second;
    if (mods[i].first.empty()) continue;  // the root
    nn::Module::ForwardWrapper prev = m->forward_wrapper();
    saved_.emplace_back(m, prev);
    m->set_forward_wrapper([this, i, prev](nn::Module& self, const Tensor& x) {
      stack_.push_back({&paths_[i], &self});
      const uint64_t first = next_sequence_nr();
      Tensor y;
      try {
        y = prev ? prev(self, x) : self.forward(x);
      } catch (...) {
        stack_.pop_back();
        throw;
      }
      stack_.pop_back();
      intervals_.push_back({first, next_sequence_nr(), stack_.size(), i});
      if (on_output_) y = on_output_(paths_[i], self, std::move(y));
      return y;
    });
  }
}

void ModuleTracker::detach() {
  for (auto& [m, prev] : saved_) m->set_forward_wrapper(prev);
  saved_.clear();
  stack_.clear();
  intervals_.clear();
}

std::string ModuleTracker::current_path() const {
  return stack_.empty() ? std::string() : *stack_.back().path;
}

std::string ModuleTracker::current_kind() const {
  return stack_.empty() ? std::string() : stack_.back().module->kind();
}

std::string ModuleTracker::module_of_node(uint64_t seq) const {
  const Interval* best = nullptr;
  for (const Interval& iv : intervals_) {
    if (seq >= iv.begin && seq < iv.end && (!best || iv.depth > best->depth)) best = &iv;
  }
  return best ? paths_[best->module] : std::string();
}

void ModuleTracker::clear_nodes() {
  intervals_.clear();
}

}  // namespace mixp::inspect
