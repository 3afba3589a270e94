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

// Multi-line JSON where each object or array that fits in one short line is written on one line
// (a tensor, a step), so that a regenerated file diffs line by line.
std::string format_record(const nlohmann::json& j);

}  // namespace mixp::test::golden
