// Golden runs: `mixp train` on mlp, cnn and gpt in every recipe (and a few variants) must give,
// bit for bit, the losses, the --json results and every saved tensor recorded in
// tests/golden/engine/<class>/<run>.json for this host's CPU class (mixp::cpu_class(): the order
// GEMMs sum in depends on it). This pins the engine's numerics across refactors (issue 12:
// "bit-identical results before and after"). A host of a class without recordings checks the
// nearest recorded class within a tolerance per recipe family (issue 29). MIXP_UPDATE_GOLDEN=1
// rewrites this class's files instead of comparing (tests/golden/engine/regenerate.sh);
// docs/engine.md, "Golden runs", says when that is allowed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "golden_run.h"
#include "mixp/format/cpu_features.h"
#include "mixp/train/recipe.h"
#include "common/test_paths.h"

namespace mixp::test::golden {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGoldenDir = fs::path(MIXP_TEST_DATA) / "engine";
constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
constexpr const char* kFortunes = "/usr/share/games/fortunes/fortunes";
// Fashion-MNIST's first images, written uncompressed: decompressing the whole set would take
// most of a run's time.
constexpr uint32_t kTrainImages = 512;
constexpr uint32_t kTestImages = 128;

bool updating() {
  const char* e = std::getenv("MIXP_UPDATE_GOLDEN");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

// Environment variables that change which kernels run: the bit-identical values are not for them
// (the run is checked within the cross-class tolerance instead).
std::optional<std::string> kernel_override() {
  for (const char* v :
       {"MIXP_BACKEND", "MIXP_CPU_GEMM", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_CPU_ISA_HINTS",
        "ONEDNN_CPU_ISA_HINTS", "DNNL_DEFAULT_FPMATH_MODE", "ONEDNN_DEFAULT_FPMATH_MODE"}) {
    if (const char* e = std::getenv(v)) return std::string(v) + "=" + e;
  }
  return std::nullopt;
}

// What the results depend on besides the code: the SIMD tier mixp dispatches to (capped by
// MIXP_CPU_TIER) and the CPU features oneDNN picks its kernels by. AVX-VNNI (the VEX-encoded
// VPDPBUSD of Zen 5 and Alder Lake) is left out: no mixp kernel dispatches on it
// (src/format/cpu_features.cpp; platform.cpp only names it in `mixp doctor` when AVX-512 VNNI is
// absent) and oneDNN prefers its AVX-512 kernels wherever AVX-512 is present, so on such a CPU
// the golden runs reproduce bit for bit (checked on an AMD EPYC with avx_vnni, 2026-11-28).
json environment() {
  std::vector<std::string> features;
  for (const std::string& f : cpu_features().names()) {
    if (f != "avx_vnni") features.push_back(f);
  }
  return {{"simd_tier", to_string(simd_tier())}, {"cpu_features", features}};
}

// The first n records of a gzipped IDX file, with the count in its header set to n.
std::string idx_head(const fs::path& gz, uint32_t n) {
  gzFile f = gzopen(gz.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + gz.string());
  auto read = [&](size_t bytes) {
    std::string s(bytes, '\0');
    if (gzread(f, s.data(), static_cast<unsigned>(bytes)) != static_cast<int>(bytes)) {
      gzclose(f);
      throw std::runtime_error(gz.string() + ": shorter than expected");
    }
    return s;
  };
  std::string header = read(4);
  const int dims = static_cast<unsigned char>(header[3]);
  header += read(4 * size_t(dims));
  auto dim = [&](int i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v = (v << 8) | static_cast<unsigned char>(header[4 + 4 * i + b]);
    return v;
  };
  size_t record = 1;
  for (int i = 1; i < dims; ++i) record *= dim(i);
  if (dim(0) < n) throw std::runtime_error(gz.string() + ": fewer records than needed");
  for (int b = 0; b < 4; ++b) header[size_t(4 + b)] = static_cast<char>((n >> (24 - 8 * b)) & 0xff);
  const std::string data = read(record * n);
  gzclose(f);
  return header + data;
}

struct Input {
  fs::path data;
  json record;  // {"what", "fnv1a64"}
};

// The run's data, from the Debian packages CI installs; nullopt when missing.
std::optional<Input> prepare_input(const std::string& model, const fs::path& dir) {
  if (model == "gpt") {
    if (!fs::exists(kFortunes)) return std::nullopt;
    const std::string text = read_text(kFortunes);
    return Input{kFortunes,
                 {{"what", std::string(kFortunes) + " (package fortunes-min)"},
                  {"fnv1a64", hex64(fnv1a64(text.data(), text.size()))}}};
  }
  const fs::path src = kFashionMnist;
  if (!fs::exists(src / "train-images-idx3-ubyte.gz")) return std::nullopt;
  const fs::path out = dir / "fashion-mnist";
  fs::create_directory(out);
  uint64_t h = fnv1a64(nullptr, 0);
  for (const auto& [split, n] :
       {std::pair{"train", kTrainImages}, std::pair{"t10k", kTestImages}}) {
    for (const char* kind : {"images-idx3-ubyte", "labels-idx1-ubyte"}) {
      const std::string name = std::string(split) + "-" + kind;
      const std::string bytes = idx_head(src / (name + ".gz"), n);
      write_text(out / name, bytes);
      h = fnv1a64(bytes.data(), bytes.size(), h);
    }
  }
  return Input{out,
               {{"what", fmt::format("{} (package dataset-fashion-mnist): the first {} training "
                                     "and {} test images",
                                     kFashionMnist, kTrainImages, kTestImages)},
                {"fnv1a64", hex64(h)}}};
}

std::string substitute(std::string s, const std::string& key, const std::string& value) {
  for (size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), value);
  return s;
}

// For /bin/sh (the test's temporary paths hold no quote). Appended piecewise: GCC 12 reports a
// false -Wrestrict in `"'" + s + "'"`.
std::string shell_quoted(const fs::path& p) {
  std::string s = "'";
  s += p.string();
  s += '\'';
  return s;
}

// What a run is pinned by: its --json results, every step of its --log, its checkpoint.
json record_run(const json& result, const fs::path& log, const fs::path& save) {
  json rec;
  json& r = rec["result"] = json::object();
  for (const char* k : {"precision", "recipe", "layer_precision", "optimizer", "steps",
                        "skipped_steps", "batch", "grad_accum", "parameters"}) {
    if (result.contains(k)) r[k] = result[k];
  }
  for (const char* k : {"loss_scale", "epochs", "final_loss", "test_accuracy", "test_loss",
                        "fake_quant_accuracy", "val_loss"}) {
    if (result.contains(k)) r[k] = pin(result[k]);
  }
  json& steps = rec["steps"] = json::array();
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const json l = json::parse(line);
    json step = json::object();
    for (const char* k :
         {"step", "epoch", "loss", "loss_scale", "skipped", "skipped_steps", "grad_norm", "lr"}) {
      step[k] = l.at(k);
    }
    steps.push_back(step);
  }
  json& ck = rec["checkpoint"] = json::object();
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(save)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  ck["files"] = files;
  // state.json without what names this machine's paths (config: the data and save folders) or
  // measures time.
  json state = json::parse(read_text(save / "state.json"));
  state.erase("config");
  if (state.contains("metrics")) state["metrics"].erase("train_time_s");
  ck["state"] = state;
  for (const std::string& f : files) {
    if (f.ends_with(".safetensors")) ck["tensors"][f] = fingerprint_safetensors(save / f);
  }
  return rec;
}

// The class whose recordings this host is checked against: MIXP_GOLDEN_CLASS (to record or
// check another class's files, e.g. the cross-class path on a host that has its own) or
// mixp::cpu_class().
std::string golden_class() {
  const char* e = std::getenv("MIXP_GOLDEN_CLASS");
  return e != nullptr && *e != '\0' ? std::string(e) : std::string(cpu_class());
}

// The classes with recordings: the folders under tests/golden/engine.
std::vector<std::string> recorded_classes() {
  std::vector<std::string> out;
  if (!fs::exists(kGoldenDir)) return out;
  for (const auto& e : fs::directory_iterator(kGoldenDir)) {
    if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Ran {
  json record;
  std::string args;  // the command line as run, for messages
};

// Runs `run` (with `env` set for the CLI only) and builds its record; nullopt with `skip` set
// when the data is not installed or is not the recorded data (`want_input`, when given).
std::optional<Ran> run_and_record(const GoldenRun& run, const TempDir& dir,
                                  const std::vector<std::pair<std::string, std::string>>& env,
                                  const json* want_input, std::string& skip) {
  const auto input = prepare_input(run.model, dir.path());
  if (!input) {
    skip = "the data for " + run.model + " is not installed (" +
           (run.model == "gpt" ? "fortunes-min" : "dataset-fashion-mnist") + ")";
    return std::nullopt;
  }
  if (want_input != nullptr && (*want_input)["fnv1a64"] != input->record["fnv1a64"]) {
    skip = "the input data differs from the golden run's (" + want_input->dump() + " vs " +
           input->record.dump() + "): an updated Debian package?";
    return std::nullopt;
  }
  const std::string command = run.args + " " + kCommonArgs;
  const fs::path log = dir / "run.jsonl", save = dir / "ck";
  std::string args = substitute(command, "{data}", shell_quoted(input->data));
  args = substitute(args, "{log}", shell_quoted(log));
  args = substitute(args, "{save}", shell_quoted(save));
  const CliResult r = run_cli("train " + args, env);
  if (r.exit_code != 0) throw std::runtime_error("mixp train " + args + " failed:\n" + r.err);

  json got = record_run(json::parse(r.out), log, save);
  got["format"] = "mixp-golden-run";
  got["version"] = 1;
  got["run"] = run.name;
  got["command"] = "mixp train " + command;
  got["environment"] = environment();
  got["recorded_on"] = cpu_features().model;
  got["input"] = input->record;
  return Ran{got, args};
}

// Compares a run with the recording of another class (or under a kernel override) within the
// run's family tolerance; prints the differences measured.
void expect_cross_class(const GoldenRun& run, const json& want, const json& got,
                        const std::string& against, const std::string& args) {
  std::string measured;
  const std::vector<std::string> fails =
      cross_class_diff(want, got, cross_class_tolerance(run.name), &measured);
  std::cout << "[ CROSS    ] " << run.name << " vs " << against << ": " << measured << "\n";
  if (!fails.empty()) {
    std::ostringstream msg;
    msg << "run " << run.name << " is not within the cross-class tolerance of " << against
        << ":\n";
    for (const std::string& f : fails) msg << "  " << f << "\n";
    msg << "command: mixp train " << args;
    ADD_FAILURE() << msg.str();
  }
}

json read_golden(const fs::path& file) {
  return json::parse(read_text(file));
}

class GoldenRunTest : public ::testing::TestWithParam<GoldenRun> {};

// On a host whose class has a recording (and no variable redirects kernels): the run equals the
// recording bit for bit. Otherwise: the cross-class check against the nearest recorded class
// (docs/engine.md, Golden runs), so that no host runs no training check.
TEST_P(GoldenRunTest, MatchesGolden) {
  const GoldenRun& run = GetParam();
  const std::string cls = golden_class();
  const fs::path own_file = kGoldenDir / cls / (run.name + ".json");
  const bool update = updating();
#ifndef NDEBUG
  GTEST_SKIP() << "golden values are for an optimized build (NDEBUG, the release preset); this "
                  "test binary is a debug build, whose code may round differently";
#endif
  const auto override_var = kernel_override();
  if (update && override_var) {
    GTEST_SKIP() << override_var.value() << " is set: it changes the kernels; recordings are "
                 << "for the default dispatch";
  }
  if (update && cls != cpu_class()) {
    FAIL() << "MIXP_GOLDEN_CLASS=" << cls << " but this host is of class " << cpu_class()
           << ": a class is recorded on a machine of that class";
  }
  std::string against = cls;
  const bool exact = !override_var && fs::exists(own_file);
  if (!update && !fs::exists(own_file)) against = nearest_class(cls, recorded_classes());
  const fs::path golden_file = kGoldenDir / against / (run.name + ".json");
  json want;
  if (!update) {
    ASSERT_FALSE(against.empty()) << "no golden recordings under " << kGoldenDir;
    ASSERT_TRUE(fs::exists(golden_file))
        << "no golden file " << golden_file << " for run " << run.name
        << ": record it with tests/golden/engine/regenerate.sh (docs/engine.md, Golden runs)";
    want = read_golden(golden_file);
  }

  TempDir dir;
  std::string skip;
  const auto ran = run_and_record(run, dir, {}, update ? nullptr : &want["input"], skip);
  if (!ran) GTEST_SKIP() << skip;
  json got = ran->record;

  if (update) {
    fs::create_directories(own_file.parent_path());
    write_text(own_file, format_record(got));
    std::cout << "[ GOLDEN   ] wrote " << own_file.string() << "\n";
    return;
  }
  if (!exact) {
    expect_cross_class(run, want, got,
                       against + (override_var ? " (" + override_var.value() + " set)" : ""),
                       ran->args);
    return;
  }
  // Informational only: which machine recorded the file.
  want.erase("recorded_on");
  got.erase("recorded_on");
  const std::vector<std::string> diffs = diff_records(want, got);
  if (!diffs.empty()) {
    std::ostringstream msg;
    msg << "run " << run.name << " differs from " << golden_file.string() << " in " << diffs.size()
        << " place(s):\n";
    constexpr size_t kShown = 40;
    for (size_t i = 0; i < std::min(diffs.size(), kShown); ++i) msg << "  " << diffs[i] << "\n";
    if (diffs.size() > kShown) msg << "  ... and " << diffs.size() - kShown << " more\n";
    msg << "command: mixp train " << ran->args << "\n"
        << "If the change is intended, regenerate with tests/golden/engine/regenerate.sh and say "
           "why in the commit message (docs/engine.md, Golden runs).";
    if (want["environment"] != got["environment"]) {
      msg << "\nThe recording's environment " << want["environment"].dump() << " is not this "
          << "machine's " << got["environment"].dump() << ": if only that explains the "
          << "difference, mixp::cpu_class() (src/format/cpu_features.cpp) misses a feature that "
          << "changes the summation order.";
    }
    ADD_FAILURE() << msg.str();
  }
}

// The cross-class check where it runs on every host: a few runs with MIXP_CPU_TIER=avx2 in the
// CLI's environment (mixp's kernels sum 8 lanes instead of 16: another summation order; on
// 2026-11-29 it moved these runs' losses by up to 4.4e-4 relative, golden_run.cpp), against this
// class's recording or the nearest one. MIXP_CPU_GEMM=onednn was tried first and changed nothing
// in these small runs (their bf16 GEMMs stay on oneDNN anyway).
class GoldenCrossClassTest : public ::testing::TestWithParam<GoldenRun> {};

TEST_P(GoldenCrossClassTest, WithinToleranceUnderAnotherSummationOrder) {
  const GoldenRun& run = GetParam();
#ifndef NDEBUG
  GTEST_SKIP() << "golden values are for an optimized build (NDEBUG, the release preset)";
#endif
  if (updating()) GTEST_SKIP() << "recording: nothing to compare";
  if (const auto o = kernel_override()) GTEST_SKIP() << o.value() << " is set";
  const std::string cls = golden_class();
  const std::string against = fs::exists(kGoldenDir / cls / (run.name + ".json"))
                                  ? cls
                                  : nearest_class(cls, recorded_classes());
  ASSERT_FALSE(against.empty()) << "no golden recordings under " << kGoldenDir;
  const json want = read_golden(kGoldenDir / against / (run.name + ".json"));
  TempDir dir;
  std::string skip;
  const auto ran = run_and_record(run, dir, {{"MIXP_CPU_TIER", "avx2"}}, &want["input"], skip);
  if (!ran) GTEST_SKIP() << skip;
  expect_cross_class(run, want, ran->record, against + " (MIXP_CPU_TIER=avx2)", ran->args);
}

std::vector<GoldenRun> cross_class_runs() {
  std::vector<GoldenRun> out;
  for (const GoldenRun& r : golden_runs()) {
    for (const char* n : {"cnn-tf32", "cnn-bf16-pure", "gpt-bf16-pure", "gpt-fp8", "cnn-int2-qat"}) {
      if (r.name == n) out.push_back(r);
    }
  }
  return out;
}

std::string test_name(const ::testing::TestParamInfo<GoldenRun>& info) {
  std::string s = info.param.name;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Engine, GoldenRunTest, ::testing::ValuesIn(golden_runs()), test_name);
INSTANTIATE_TEST_SUITE_P(Engine, GoldenCrossClassTest, ::testing::ValuesIn(cross_class_runs()),
                         test_name);

TEST(GoldenRuns, CoverEveryRecipeOnEveryModelItSupports) {
  const auto& runs = golden_runs();
  auto has = [&](const std::string& name) {
    return std::any_of(runs.begin(), runs.end(),
                       [&](const GoldenRun& r) { return r.name == name; });
  };
  for (const std::string& recipe : train::available_recipes()) {
    for (const char* model : {"mlp", "cnn", "gpt"}) {
      const std::string name = std::string(model) + "-" + recipe;
      EXPECT_EQ(has(name), train::recipe_supports_model(recipe, model))
          << name << ": every recipe a model supports has a golden run (golden_run.cpp)";
    }
  }
}

TEST(GoldenRuns, EveryGoldenFileHasARunInAClassFolder) {
  if (!fs::exists(kGoldenDir)) GTEST_SKIP() << "no golden files yet";
  const auto& runs = golden_runs();
  for (const auto& e : fs::recursive_directory_iterator(kGoldenDir)) {
    if (e.path().extension() != ".json") continue;
    const std::string cls = e.path().parent_path().filename().string();
    EXPECT_NE(std::find(cpu_classes().begin(), cpu_classes().end(), cls), cpu_classes().end())
        << e.path() << ": golden files live in tests/golden/engine/<class>/, <class> one of "
        << "mixp::cpu_classes()";
    const std::string name = e.path().stem().string();
    EXPECT_TRUE(
        std::any_of(runs.begin(), runs.end(), [&](const GoldenRun& r) { return r.name == name; }))
        << e.path() << " belongs to no run: remove it or add the run to golden_run.cpp";
  }
}

TEST(GoldenRuns, NearestClassIsTheClosestRecordedOneMoreCapableOnATie) {
  EXPECT_EQ(nearest_class("amx", {"avx512-bf16"}), "avx512-bf16");
  EXPECT_EQ(nearest_class("amx", {"amx", "avx512-bf16"}), "amx");
  EXPECT_EQ(nearest_class("avx2", {"avx512", "scalar"}), "avx512");
  EXPECT_EQ(nearest_class("avx2", {"avx512-bf16", "scalar"}), "scalar");
  EXPECT_EQ(nearest_class("avx512", {"amx", "avx512-bf16", "avx2"}), "avx512-bf16");
  EXPECT_EQ(nearest_class("riscv", {"avx2", "avx512-bf16"}), "avx512-bf16");
  EXPECT_EQ(nearest_class("amx", {"not-a-class"}), "");
  EXPECT_EQ(nearest_class("amx", {}), "");
}

TEST(GoldenRuns, ThisHostHasARecordedClassToCompareWith) {
  // Every host runs training checks: bit for bit on its own class, else within tolerance of
  // the nearest recorded class.
  EXPECT_FALSE(nearest_class(cpu_class(), recorded_classes()).empty());
}

TEST(GoldenRuns, CrossClassToleranceByRecipeFamily) {
  EXPECT_STREQ(cross_class_tolerance("mlp-fp32").family, "fp32");
  EXPECT_STREQ(cross_class_tolerance("mlp-fp32-accum-clip").family, "fp32");
  EXPECT_STREQ(cross_class_tolerance("gpt-fp64").family, "fp32");
  EXPECT_STREQ(cross_class_tolerance("cnn-bf16-pure").family, "half");
  EXPECT_STREQ(cross_class_tolerance("gpt-fp16-skip").family, "half");
  EXPECT_STREQ(cross_class_tolerance("gpt-fp8-head-ckpt").family, "fp8");
  EXPECT_STREQ(cross_class_tolerance("cnn-mxfp8").family, "fp8");
  EXPECT_STREQ(cross_class_tolerance("cnn-int8-qat-epoch1").family, "quantized");
  EXPECT_STREQ(cross_class_tolerance("mlp-binary-act").family, "quantized");
  EXPECT_LT(cross_class_tolerance("mlp-fp32").loss_rel, cross_class_tolerance("mlp-bf16").loss_rel);
}

TEST(GoldenRuns, CrossClassDiffToleratesSummationOrderNotStructure) {
  const json want = {
      {"result",
       {{"steps", 4}, {"skipped_steps", 0}, {"parameters", 10}, {"recipe", "bf16: ..."},
        {"final_loss", pin(2.0)}, {"test_loss", pin(1.5)}, {"test_accuracy", pin(0.5)}}},
      {"steps", {{{"step", 1}, {"loss", 2.0}, {"grad_norm", 1.0}, {"lr", 0.001}}}},
      {"checkpoint",
       {{"files", {"model.safetensors"}},
        {"tensors",
         {{"model.safetensors",
           {{"tensors", {{"w", {{"dtype", "BF16"}, {"shape", {2, 5}}, {"fnv1a64", "aa"}}}}}}}}}}}};
  const CrossClassTolerance tol{"half", 1e-2, 0.1};
  json got = want;
  got["result"]["final_loss"] = pin(2.01);  // rel 5e-3
  got["result"]["test_accuracy"] = pin(0.45);
  got["steps"][0]["loss"] = 2.5;
  got["steps"][0]["grad_norm"] = 3.0;
  got["checkpoint"]["tensors"]["model.safetensors"]["tensors"]["w"]["fnv1a64"] = "bb";
  std::string measured;
  EXPECT_TRUE(cross_class_diff(want, got, tol, &measured).empty());
  EXPECT_NE(measured.find("final_loss rel +0.005"), std::string::npos) << measured;

  json far = got;
  far["result"]["test_loss"] = pin(1.6);  // rel 6.7e-2
  far["result"]["test_accuracy"] = pin(0.3);
  auto d = cross_class_diff(want, far, tol);
  ASSERT_EQ(d.size(), 2u) << ::testing::PrintToString(d);
  EXPECT_NE(d[0].find("/result/test_loss"), std::string::npos) << d[0];
  EXPECT_NE(d[1].find("/result/test_accuracy"), std::string::npos) << d[1];

  json nan = got;
  nan["result"]["final_loss"] = pin(std::nan(""));
  EXPECT_EQ(cross_class_diff(want, nan, tol).size(), 1u);

  json structural = got;
  structural["result"]["skipped_steps"] = 1;
  structural["steps"][0]["lr"] = 0.002;
  structural["checkpoint"]["tensors"]["model.safetensors"]["tensors"]["w"]["shape"] = {5, 2};
  d = cross_class_diff(want, structural, tol);
  ASSERT_EQ(d.size(), 4u) << ::testing::PrintToString(d);  // the shape: one line per dimension
  EXPECT_NE(d[0].find("/result/skipped_steps"), std::string::npos) << d[0];
  EXPECT_NE(d[1].find("/steps[step 1]/lr"), std::string::npos) << d[1];
  EXPECT_NE(d[2].find("/checkpoint/tensors/model.safetensors/w/shape/0"), std::string::npos)
      << d[2];
}

TEST(GoldenRuns, Fnv1a64KnownValues) {
  // The published test vectors of FNV-1a 64.
  EXPECT_EQ(hex64(fnv1a64("", 0)), "cbf29ce484222325");
  EXPECT_EQ(hex64(fnv1a64("a", 1)), "af63dc4c8601ec8c");
  EXPECT_EQ(hex64(fnv1a64("foobar", 6)), "85944171f73967e8");
}

TEST(GoldenRuns, DiffNamesWhatDiffersAndByHowMuch) {
  const json want = {{"steps", {{{"step", 1}, {"loss", pin(2.5)}}}},
                     {"tensors", {{"fc1.weight", {{"fnv1a64", "00"}}}, {"gone", 1}}},
                     {"zero", 0.0}};
  const float next = std::nextafter(2.5f, 3.0f);
  const json got = {{"steps", {{{"step", 1}, {"loss", pin(double(next))}}}},
                    {"tensors", {{"fc1.weight", {{"fnv1a64", "01"}}}, {"new", 2}}},
                    {"zero", -0.0}};
  const auto d = diff_records(want, got);
  ASSERT_EQ(d.size(), 5u) << ::testing::PrintToString(d);
  EXPECT_NE(d[0].find("/steps[step 1]/loss: got 2.5000002"), std::string::npos) << d[0];
  EXPECT_NE(d[0].find("1 ulp of fp32"), std::string::npos) << d[0];
  EXPECT_NE(d[1].find("/tensors/fc1.weight/fnv1a64: got \"01\" want \"00\""), std::string::npos)
      << d[1];
  EXPECT_NE(d[2].find("/tensors/gone: missing"), std::string::npos) << d[2];
  EXPECT_NE(d[3].find("/tensors/new: not in the golden file"), std::string::npos) << d[3];
  EXPECT_NE(d[4].find("/zero: got -0.0 want 0.0"), std::string::npos) << d[4];
  EXPECT_TRUE(diff_records(want, want).empty());
}

}  // namespace
}  // namespace mixp::test::golden
