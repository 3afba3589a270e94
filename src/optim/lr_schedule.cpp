#include "mixp/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "util/enum_names.h"
#include "util/text.h"

namespace mixp::optim {

namespace {
constexpr mixp::detail::EnumName<ScheduleKind> kScheduleNames[] = {
    {ScheduleKind::constant, "constant"},
    {ScheduleKind::cosine, "cosine"},
    {ScheduleKind::warmup_cosine, "warmup_cosine"},
    {ScheduleKind::linear, "linear"}};
}  // namespace

std::string_view to_string(ScheduleKind k) {
  return mixp::detail::name_of(kScheduleNames, k);
}

std::vector<std::string> schedule_kind_names() {
  return mixp::detail::names_of(kScheduleNames);
}

ScheduleKind parse_schedule_kind(std::string_view s) {
  if (s == "warmup-cosine") return ScheduleKind::warmup_cosine;
  if (const auto k = mixp::detail::value_of(kScheduleNames, s)) return *k;
  throw std::invalid_argument(
      fmt::format("mixp::optim: unknown learning-rate schedule '{}'; known: {}", s,
                  mixp::detail::join(schedule_kind_names())));
}

double LrSchedule::lr_at(int64_t step) const {
  if (step < 0)
    throw std::invalid_argument(
        fmt::format("mixp::optim::LrSchedule: step must be >= 0, got {}", step));
  if (!std::isfinite(base_lr) || base_lr < 0 || !std::isfinite(min_lr) || min_lr < 0 ||
      warmup_steps < 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::optim::LrSchedule: need base_lr, min_lr >= 0 and warmup_steps >= 0, got {}, {}, {}",
        base_lr, min_lr, warmup_steps));
  }
  if (kind != ScheduleKind::constant && total_steps <= 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::optim::LrSchedule: a {} schedule needs total_steps > 0", to_string(kind)));
  }
  if (step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == ScheduleKind::constant) return base_lr;
  const double p = total_steps > warmup_steps
                       ? std::clamp(static_cast<double>(step - warmup_steps) /
                                        static_cast<double>(total_steps - warmup_steps),
                                    0.0, 1.0)
                       : 1.0;
  if (kind == ScheduleKind::linear) return base_lr + (min_lr - base_lr) * p;
  return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace mixp::optim
