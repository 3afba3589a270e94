// What `--inspect SPEC` asks for (docs/inspect.md): which steps, modules, roles and formats.
//
//   SPEC = key=value,...   (every key optional; lists joined with '+')
//     every=N            inspect steps start, start+N, ... (default 1)
//     start=S, end=E     first and last step inspected (1-based; default 1 and the run's end)
//     modules=P+Q        module paths, '*' matching any run of characters
//                        (blocks.*.attn.qkv, head); default every module
//     roles=R+...        activation, activation-grad, weight, weight-grad, optimizer-state,
//                        fp8-operand (the operands of the FP8 layers' per-tensor casts at the
//                        scale the cast used; tensor_inspector.h) (default all)
//     formats=F+...      fp16, bf16, fp8_e4m3, fp8_e5m2, mxfp8, int8 (default all)
//     out=PATH           the JSON Lines file (default inspect.jsonl)
//     dump=DIR           also write each inspected tensor as raw little-endian fp32
//                        (DIR/<step>.<module>.<role>[.<tensor>].f32), for checking by another tool
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/inspect/tensor_stats.h"

namespace mixp::inspect {

enum class Role : uint8_t {
  activation,
  activation_grad,
  weight,
  weight_grad,
  optimizer_state,
  fp8_operand
};
const char* to_string(Role r);
// Every role, in the order above.
std::span<const Role> all_roles();

class InspectError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct InspectSpec {
  int64_t every = 1;
  int64_t start = 1;
  int64_t end = 0;  // 0: no last step
  std::vector<std::string> modules;
  std::vector<Role> roles;  // empty: all
  std::vector<StatFormat> formats{all_stat_formats().begin(), all_stat_formats().end()};
  std::filesystem::path out = "inspect.jsonl";
  std::filesystem::path dump;

  bool step_selected(int64_t step) const;
  bool wants(Role r) const;
  bool module_selected(std::string_view path) const;
};

// Throws InspectError naming the key and what it takes.
InspectSpec parse_inspect_spec(std::string_view text);

// '*' matches any run of characters (dots included); everything else literally.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace mixp::inspect
