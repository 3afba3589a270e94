// The op names and autocast classes of mixp/autograd/op_list.h. They live with autograd's graph
// core (a node names its op), below the ops that record them (docs/architecture.md 2.2).
#include "mixp/autograd/op_list.h"

namespace mixp {

namespace {
#define MIXP_X(id, nm, kind, policy) nm,
constexpr std::string_view kOpNames[] = {MIXP_OP_LIST(MIXP_X)};
#undef MIXP_X
#define MIXP_X(id, nm, kind, policy) OpKind::kind,
constexpr OpKind kOpKinds[] = {MIXP_OP_LIST(MIXP_X)};
#undef MIXP_X
}  // namespace

std::string_view op_name(OpId op) {
  return kOpNames[static_cast<int>(op)];
}
OpKind op_kind(OpId op) {
  return kOpKinds[static_cast<int>(op)];
}

}  // namespace mixp
