#include "mixp/amp/cast_policy.h"

#include <fmt/format.h>

namespace mixp::amp {

namespace {
std::string banned_message(OpId op) {
  const std::string_view alt = banned_alternative(op);
  if (op == OpId::binary_cross_entropy) {
    // PyTorch's wording: the usual cause is a sigmoid right before the loss.
    return fmt::format(
        "mixp::{}: unsafe to autocast to fp16 (its log terms over- and underflow in half "
        "precision). "
        "Many models apply a sigmoid right before binary cross entropy; combine the two with "
        "mixp::{}(logits, target), which is safe to autocast, or run this op outside the fp16 "
        "region "
        "(amp::Autocast(DType::fp16, false)) on fp32 inputs",
        op_name(op), alt);
  }
  return fmt::format("mixp::{}: unsafe to autocast to fp16; use {} instead", op_name(op),
                     alt.empty() ? std::string_view("an fp32 region") : alt);
}
}  // namespace

BannedOpError::BannedOpError(OpId op) : std::runtime_error(banned_message(op)), op_(op) {}

}  // namespace mixp::amp
