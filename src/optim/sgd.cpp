#include "mixp/optim/sgd.h"

#include <fmt/format.h>

#include <stdexcept>

namespace mixp::optim {

namespace {
const SGDOptions& checked(const SGDOptions& o) {
  if (!(o.momentum >= 0.0) || !(o.dampening >= 0.0) || !(o.weight_decay >= 0.0)) {
    throw std::invalid_argument(fmt::format(
        "mixp::optim::SGD: momentum ({}), dampening ({}) and weight_decay ({}) must be >= 0",
        o.momentum, o.dampening, o.weight_decay));
  }
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    throw std::invalid_argument(
        "mixp::optim::SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  }
  return o;
}
std::vector<std::string> slots_of(const SGDOptions& o) {
  return o.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                           : std::vector<std::string>{};
}
}  // namespace

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& opt)
    : SGD(name_by_index(params), opt) {}

SGD::SGD(NamedTensors params, const SGDOptions& opt)
    : Optimizer(std::move(params), checked(opt).lr, opt.precision, slots_of(opt)), opt_(opt) {}

UpdateRule SGD::update_rule(int64_t step) const {
  UpdateRule r;
  r.kind = UpdateRule::Kind::sgd;
  r.s[0] = lr();
  r.s[1] = opt_.weight_decay;
  r.s[2] = opt_.momentum;
  r.s[3] = 1.0 - opt_.dampening;
  r.sgd_first = step == 1;
  r.sgd_nesterov = opt_.nesterov;
  r.sgd_momentum = opt_.momentum != 0.0;
  r.sgd_weight_decay = opt_.weight_decay != 0.0;
  return r;
}

}  // namespace mixp::optim
