#include "mixp/nn/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"

namespace mixp::nn {

Module::Module(std::string kind) : kind_(std::move(kind)) {}
Module::~Module() = default;

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty())
    throw std::invalid_argument(
        fmt::format("mixp::nn: a {} of a '{}' module needs a non-empty name", what, kind()));
  if (name.find('.') != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("mixp::nn: {} name '{}' contains '.'; dots separate module names", what, name));
  }
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  if (taken(params_) || taken(buffers_) || taken(children_)) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn: '{}' is already registered in this '{}' module (names must be unique)", name,
        kind()));
  }
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  if (!t.defined())
    throw std::invalid_argument(fmt::format("mixp::nn: parameter '{}' is undefined", name));
  if (!t.is_leaf()) t = t.detach();  // a parameter is a leaf of every graph it enters
  if (requires_grad && t.is_floating_point()) t.requires_grad_(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  if (!t.defined())
    throw std::invalid_argument(fmt::format("mixp::nn: buffer '{}' is undefined", name));
  buffers_.emplace_back(name, t.detach());
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  if (!m) throw std::invalid_argument(fmt::format("mixp::nn: module '{}' is null", name));
  m->train(training_);
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  if (!m) throw std::invalid_argument(fmt::format("mixp::nn: module '{}' is null", name));
  for (auto& [n, c] : children_) {
    if (n == name) {
      m->train(training_);
      std::swap(c, m);
      return m;
    }
  }
  throw std::out_of_range(fmt::format("mixp::nn: no child module '{}' to replace", name));
}

void Module::collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params ? params_ : buffers_) {
    const TensorImpl* id = t.impl();
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", params, true, out, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", true, recurse, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", false, recurse, out, seen);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  }
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (auto& [name, m] : const_cast<Module*>(this)->named_modules()) out.emplace_back(name, m);
  return out;
}

namespace {
std::string names_of(const NamedTensors& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i].first;
  if (v.size() > 8) s += fmt::format(", ... ({} in all)", v.size());
  return s;
}
}  // namespace

Tensor Module::parameter(const std::string& dotted_name) const {
  for (auto& [name, t] : named_parameters()) {
    if (name == dotted_name) return t;
  }
  throw std::out_of_range(fmt::format("mixp::nn: no parameter '{}'; the parameters are: {}",
                                      dotted_name, names_of(named_parameters())));
}

Tensor Module::buffer(const std::string& dotted_name) const {
  for (auto& [name, t] : named_buffers()) {
    if (name == dotted_name) return t;
  }
  throw std::out_of_range(fmt::format("mixp::nn: no buffer '{}'; the buffers are: {}", dotted_name,
                                      names_of(named_buffers())));
}

Module& Module::module(const std::string& dotted_name) {
  for (auto& [name, m] : named_modules()) {
    if (name == dotted_name) return *m;
  }
  throw std::out_of_range(
      fmt::format("mixp::nn: no submodule '{}' in this '{}' module", dotted_name, kind()));
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.set_grad(Tensor());
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& e : named_buffers()) out.push_back(std::move(e));
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, &t).second)
      throw std::invalid_argument(
          fmt::format("mixp::nn::load_state_dict: '{}' is given twice", name));
  }
  NamedTensors mine = state_dict();
  // Check everything before changing anything.
  for (const auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      throw std::invalid_argument(
          fmt::format("mixp::nn::load_state_dict: missing '{}' (shape {}) that this model needs",
                      name, t.shape().str()));
    }
    if (!it->second->defined() || !(it->second->shape() == t.shape())) {
      throw std::invalid_argument(fmt::format(
          "mixp::nn::load_state_dict: '{}' has shape {} but the model's is {}", name,
          it->second->defined() ? it->second->shape().str() : "(undefined)", t.shape().str()));
    }
  }
  if (strict && given.size() != mine.size()) {
    for (const auto& [name, t] : given) {
      const bool known =
          std::any_of(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; });
      if (!known)
        throw std::invalid_argument(fmt::format(
            "mixp::nn::load_state_dict: unexpected '{}' that this model does not have", name));
    }
  }
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    const Tensor& src = *given.at(name);
    if (!src.is_same(t)) t.copy_(src);
  }
}

void Module::str_into(const std::string& name, int depth, std::string& out) const {
  out += std::string(static_cast<size_t>(depth) * 2, ' ');
  out += name.empty() ? std::string("(root)") : name;
  out += " (" + kind() + ")";
  const std::string d = describe();
  if (!d.empty()) out += " " + d;
  for (const auto& [pname, t] : params_) out += fmt::format(" {}{}", pname, t.shape().str());
  out += "\n";
  for (const auto& [cname, child] : children_) child->str_into(cname, depth + 1, out);
}

std::string Module::str() const {
  std::string out;
  str_into("", 0, out);
  return out;
}

}  // namespace mixp::nn
