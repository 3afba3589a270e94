// Grad mode: whether ops record backward nodes. Thread-local, on by default.
#pragma once

namespace mixp {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool on);
};

// Disables recording for its lifetime (torch.no_grad()): ops under it record nothing and their
// results do not require grad. Nestable.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables recording for its lifetime (used by checkpoint's recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mixp
