// The pieces of the golden-run test (test_golden_runs.cpp) that do not run anything: the run
// table, the fingerprint of a checkpoint's tensors, and the comparison of a run's record with its
// golden file. docs/engine.md, "Golden runs", says what is pinned and why.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace mixp::test::golden {

// One `mixp train` configuration. `args` holds `{data}` where the test puts the data path; the
// flags every run shares (kCommonArgs) are appended.
struct GoldenRun {
  std::string name;   // "<model>-<recipe>[-<variant>]": the golden file's name and the test's
  std::string model;  // mlp | cnn | gpt
  std::string args;
};

// For gtest's messages and the CTest test names: the run's name.
inline void PrintTo(const GoldenRun& r, std::ostream* os) {
  *os << r.name;
}

// Every run, in a fixed order: each recipe on each model that supports it, then the variants that
// reach paths the plain runs do not (accumulation, clipping, skipped steps, policy strings, ...).
const std::vector<GoldenRun>& golden_runs();

// Appended to every run's arguments: one thread (oneDNN's reduction order depends on the thread
// count), a fixed seed, the outputs the test reads.
inline constexpr const char* kCommonArgs = "--threads 1 --seed 1 --json --log {log} --save {save}";

// FNV-1a, 64 bits (Fowler, Noll, Vo): offset basis 0xcbf29ce484222325, prime 0x100000001b3.
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
std::string hex64(uint64_t v);

// {"value": v, "bits": "<16 hex digits of the IEEE double>"}; null stays null.
nlohmann::json pin(const nlohmann::json& number);

// Every tensor of a .safetensors file: {"metadata": {...}, "tensors": {name: {"dtype", "shape",
// "fnv1a64"}}}, the hash over the tensor's raw bytes as stored. Throws on a malformed file.
nlohmann::json fingerprint_safetensors(const std::filesystem::path& file);

// The differences between a golden record and the record of this run, one line each, as
// "/json/pointer: got ... want ...". Doubles pinned with pin() are compared by their bits and
// reported with the difference; other numbers compare exactly (bit for bit when floating).
std::vector<std::string> diff_records(const nlohmann::json& want, const nlohmann::json& got);

// The recorded class nearest to `cls` among `recorded` (names from mixp::cpu_classes(), most
// capable first): the one fewest places away in that order, the more capable one on a tie (an
// AMX host compares with "avx512-bf16", an "avx2" host with "avx512" before "scalar"). Empty when
// nothing is recorded. A class not in the list is nearest to the first recorded one.
std::string nearest_class(const std::string& cls, const std::vector<std::string>& recorded);

// How far a run's results may move when GEMMs sum in another order (another CPU class, another
// kernel, another thread count) and still count as the same training: the final, test and
// validation losses within `loss_rel` of the recorded ones (relative), the accuracies within
// `accuracy_abs`. Per recipe family; golden_run.cpp says how the numbers were measured.
struct CrossClassTolerance {
  const char* family;   // "fp32" (fp64, fp32, tf32), "half" (bf16, fp16, auto), "fp8", "quantized"
  double loss_rel;
  double accuracy_abs;
};
CrossClassTolerance cross_class_tolerance(const std::string& run_name);

// The comparison of a run with a recording of another CPU class: what does not depend on the
// summation order exactly (recipe, step and skip counts, loss scales, learning rates, parameter
// count, checkpoint files and every tensor's name, dtype and shape), the losses and accuracies
// within `tol`. Returns the failures, one line each; `measured` (when given) gets one line of the
// differences found, for the test's output.
std::vector<std::string> cross_class_diff(const nlohmann::json& want, const nlohmann::json& got,
                                          const CrossClassTolerance& tol,
                                          std::string* measured = nullptr);

// Multi-line JSON where each object or array that fits in one short line is written on one line
// (a tensor, a step), so that a regenerated file diffs line by line.
std::string format_record(const nlohmann::json& j);

}  // namespace mixp::test::golden
