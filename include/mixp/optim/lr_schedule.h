// Learning-rate schedules as pure functions of the step (0-based optimizer step), so resuming a
// run needs no scheduler state. Every kind starts with an optional linear warmup (llm.c):
//   step < warmup_steps:  lr = base_lr * (step + 1) / warmup_steps
// then, with progress p = (step - warmup_steps) / (total_steps - warmup_steps) clamped to [0, 1]
// (p = 1 when total_steps <= warmup_steps):
//   constant       base_lr
//   cosine         min_lr + 0.5 * (base_lr - min_lr) * (1 + cos(pi * p))    (SGDR, Loshchilov &
//                  Hutter 2017, without restarts; torch CosineAnnealingLR's closed form)
//   warmup_cosine  the same as cosine; the name says a warmup is expected (warmup_steps > 0)
//   linear         base_lr + (min_lr - base_lr) * p
// Steps past total_steps keep the final value (min_lr for cosine/linear).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::optim {

enum class ScheduleKind { constant, cosine, warmup_cosine, linear };

std::string_view to_string(ScheduleKind k);
// "constant" | "cosine" | "warmup_cosine" (also "warmup-cosine") | "linear"; else
// std::invalid_argument listing them.
ScheduleKind parse_schedule_kind(std::string_view s);
std::vector<std::string> schedule_kind_names();

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // needed (> 0) by cosine, warmup_cosine and linear
  double min_lr = 0.0;

  // Throws std::invalid_argument for a negative step or an inconsistent schedule.
  double lr_at(int64_t step) const;
};

}  // namespace mixp::optim
