// Parsing of `--inspect SPEC` (inspect_spec.h) with the one key=value parser (util/key_value.h).
#include "mixp/inspect/inspect_spec.h"

#include <algorithm>

#include "util/key_value.h"

namespace mixp::inspect {
namespace {

const std::string kKeys[] = {"every", "start", "end", "modules", "roles", "formats", "out", "dump"};

std::vector<std::string> split_plus(std::string_view v) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= v.size()) {
    const size_t q = std::min(v.find('+', p), v.size());
    std::string item(v.substr(p, q - p));
    if (!item.empty()) out.push_back(item);
    p = q + 1;
  }
  return out;
}

constexpr Role kRoles[] = {Role::activation,      Role::activation_grad, Role::weight,
                           Role::weight_grad,     Role::optimizer_state, Role::fp8_operand};

Role parse_role(std::string_view v) {
  const size_t i = detail::parse_choice(
      "--inspect key", "roles", v,
      {"activation", "activation-grad", "weight", "weight-grad", "optimizer-state",
       "fp8-operand"});
  return kRoles[i];
}

}  // namespace

std::span<const Role> all_roles() {
  return kRoles;
}

const char* to_string(Role r) {
  switch (r) {
    case Role::activation: return "activation";
    case Role::activation_grad: return "activation-grad";
    case Role::weight: return "weight";
    case Role::weight_grad: return "weight-grad";
    case Role::optimizer_state: return "optimizer-state";
    case Role::fp8_operand: return "fp8-operand";
  }
  return "?";
}

bool glob_match(std::string_view p, std::string_view t) {
  // Iterative wildcard match with backtracking to the last '*'.
  size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  while (j < t.size()) {
    if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (i < p.size() && p[i] == t[j]) {
      ++i, ++j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

bool InspectSpec::step_selected(int64_t step) const {
  if (step < start || (end > 0 && step > end)) return false;
  return (step - start) % every == 0;
}

bool InspectSpec::wants(Role r) const {
  return roles.empty() || std::find(roles.begin(), roles.end(), r) != roles.end();
}

bool InspectSpec::module_selected(std::string_view path) const {
  if (modules.empty()) return true;
  return std::any_of(modules.begin(), modules.end(),
                     [&](const std::string& m) { return glob_match(m, path); });
}

InspectSpec parse_inspect_spec(std::string_view text) {
  InspectSpec s;
  try {
    const detail::KeyValueSyntax syntax{.list = "--inspect",
                                        .entry = "key=value",
                                        .example = "'every=100,roles=activation+weight-grad'",
                                        .noun = "--inspect key",
                                        .keys = kKeys,
                                        .lower_keys = true};
    constexpr int64_t kMax = int64_t(1) << 50;
    for (const auto& kv : detail::split_key_values(text, syntax)) {
      if (kv.key == "every") {
        s.every = detail::parse_integer("--inspect key", kv.key, kv.value, 1, kMax);
      } else if (kv.key == "start") {
        s.start = detail::parse_integer("--inspect key", kv.key, kv.value, 1, kMax);
      } else if (kv.key == "end") {
        s.end = detail::parse_integer("--inspect key", kv.key, kv.value, 1, kMax);
      } else if (kv.key == "modules") {
        s.modules = split_plus(kv.value);
      } else if (kv.key == "roles") {
        s.roles.clear();
        for (const std::string& r : split_plus(kv.value)) s.roles.push_back(parse_role(r));
      } else if (kv.key == "formats") {
        s.formats.clear();
        for (const std::string& f : split_plus(kv.value)) {
          const auto fmt = parse_stat_format(f);
          if (!fmt) {
            detail::throw_value_error("--inspect key", "formats", f,
                                      "fp16, bf16, fp8_e4m3, fp8_e5m2, mxfp8 or int8 (joined "
                                      "with '+')");
          }
          s.formats.push_back(*fmt);
        }
      } else if (kv.key == "out") {
        if (kv.value.empty()) detail::throw_value_error("--inspect key", "out", "", "a file path");
        s.out = kv.value;
      } else if (kv.key == "dump") {
        if (kv.value.empty()) detail::throw_value_error("--inspect key", "dump", "", "a folder");
        s.dump = kv.value;
      }
    }
  } catch (const detail::KeyValueError& e) {
    throw InspectError(e.what());
  }
  if (s.end > 0 && s.end < s.start) {
    throw InspectError("--inspect: end=" + std::to_string(s.end) + " is before start=" +
                       std::to_string(s.start));
  }
  return s;
}

}  // namespace mixp::inspect
