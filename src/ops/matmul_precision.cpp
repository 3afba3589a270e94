#include "mixp/ops/matmul_precision.h"

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "util/enum_names.h"

namespace mixp {

namespace {
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::highest};
std::atomic<Round> g_round{Round::nearest_even};
thread_local std::optional<Fp32GemmMode> t_override;

void check_round(Round r) {
  if (r == Round::stochastic) {
    throw std::invalid_argument(
        "mixp: tf32 GEMM inputs cannot use Round::stochastic (an operand must round the "
        "same way each time it is read); use nearest_even, nearest_away or toward_zero");
  }
}

constexpr detail::EnumName<MatmulPrecision> kPrecisionNames[] = {
    {MatmulPrecision::highest, "highest"},
    {MatmulPrecision::high, "high"},
    {MatmulPrecision::medium, "medium"}};
}  // namespace

std::string_view to_string(MatmulPrecision p) {
  return detail::name_of(kPrecisionNames, p);
}

void set_float32_matmul_precision(std::string_view precision) {
  if (const auto p = detail::value_of(kPrecisionNames, precision)) {
    return set_float32_matmul_precision(*p);
  }
  throw std::invalid_argument(
      fmt::format("mixp::set_float32_matmul_precision: unknown precision '{}'; expected "
                  "'highest' (fp32), 'high' (tf32) or 'medium' (bf16)",
                  precision));
}

void set_float32_matmul_precision(MatmulPrecision precision) {
  g_precision.store(precision);
}
MatmulPrecision float32_matmul_precision() {
  return g_precision.load();
}
void set_allow_tf32(bool allow) {
  g_precision.store(allow ? MatmulPrecision::high : MatmulPrecision::highest);
}
bool allow_tf32() {
  return g_precision.load() == MatmulPrecision::high;
}

void set_tf32_round(Round round) {
  check_round(round);
  g_round.store(round);
}
Round tf32_round() {
  return g_round.load();
}

Fp32GemmMode effective_fp32_gemm_mode() {
  if (t_override) return *t_override;
  return Fp32GemmMode{g_precision.load(std::memory_order_relaxed),
                      g_round.load(std::memory_order_relaxed)};
}

Tf32Guard::Tf32Guard(bool enabled, Round round)
    : Tf32Guard(enabled ? MatmulPrecision::high : MatmulPrecision::highest, round) {}

Tf32Guard::Tf32Guard(MatmulPrecision precision, Round round) : prev_(t_override) {
  check_round(round);
  t_override = Fp32GemmMode{precision, round};
}

Tf32Guard::~Tf32Guard() {
  t_override = prev_;
}

}  // namespace mixp
