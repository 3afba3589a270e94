// A full disk during every kind of write (split from test_integrity.cpp, issue 18): checkpoints,
// --log and --inspect lines, profile traces and studies end in a clear error with the previous
// output whole. RLIMIT_FSIZE stands in for a full disk (writes past the limit fail with EFBIG;
// SIGXFSZ ignored), which needs no privileges; a real 64 KiB tmpfs is tried too where this
// process may mount one, and skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/temp_dir.h"
#include "integrity/integrity_util.h"
#include "mixp/train/checkpoint.h"

namespace mixp {
namespace {

namespace fs = std::filesystem;
using test::read_text;
using test::TempDir;
using namespace integrity;

TEST(Integrity, FullDiskDuringSaveKeepsThePreviousCheckpoint) {
  TempDir dir;
  ASSERT_EQ(run(kRun + " --steps 5 --save ck --no-eval", dir.path()).exit_code, 0);
  const std::string before = read_text(dir / "ck" / train::kStateFile);
  // width 16: model.safetensors is ~51 KB; a 20 KB limit fails it mid-write.
  const Proc r = run(kRun + " --steps 9 --save ck --no-eval", dir.path(), 20000);
  expect_clear_error(r, "ck");
  EXPECT_EQ(read_text(dir / "ck" / train::kStateFile), before);
  EXPECT_NO_THROW(train::read_checkpoint(dir / "ck"));
  EXPECT_FALSE(any_staging_left(dir.path(), "ck"));
}

// Every JSON line of `text` parses to an object and the text ends with a newline; returns the
// number of lines.
int expect_whole_json_lines(const std::string& text) {
  EXPECT_FALSE(text.empty());
  if (!text.empty()) {
    EXPECT_EQ(text.back(), '\n');
  }
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    bool parses = true;
    try {
      parses = nlohmann::json::parse(line).is_object();
    } catch (const nlohmann::json::exception&) {
      parses = false;
    }
    EXPECT_TRUE(parses) << "line " << n << ": " << line.substr(0, 200);
  }
  return n;
}

TEST(Integrity, FullDiskDuringLogKeepsWholeLines) {
  TempDir dir;
  const Proc r = run(kRun + " --steps 400 --log log.jsonl --no-eval", dir.path(), 12000);
  expect_clear_error(r, "log.jsonl: " + std::string(std::strerror(EFBIG)));
  EXPECT_GT(expect_whole_json_lines(read_text(dir / "log.jsonl")), 10);
}

// --inspect out= is cut back to its last complete line, and the error says why (strerror of
// EFBIG: RLIMIT_FSIZE stands in for a full disk) rather than "write failed".
TEST(Integrity, FullDiskDuringInspectKeepsWholeLines) {
  TempDir dir;
  const Proc r =
      run(kRun + " --steps 400 --inspect every=1,out=insp.jsonl --no-eval", dir.path(), 12000);
  expect_clear_error(r, "insp.jsonl: " + std::string(std::strerror(EFBIG)));
  EXPECT_NE(r.err.find("cut back to its last complete line"), std::string::npos) << r.err;
  EXPECT_GT(expect_whole_json_lines(read_text(dir / "insp.jsonl")), 3);
}

// --profile-trace is written whole or not at all (io/atomic_file.h): no empty or cut trace.
TEST(Integrity, FullDiskDuringProfileTraceLeavesNoFile) {
  TempDir dir;
  const Proc r = run(kRun + " --steps 20 --profile-trace t.json --no-eval", dir.path(), 4000);
  expect_clear_error(r, "--profile-trace");
  EXPECT_NE(r.err.find(std::strerror(EFBIG)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "t.json"));
  for (const auto& n : entries(dir.path())) EXPECT_EQ(n.find("t.json"), std::string::npos) << n;
  // With room, the same run writes a whole trace.
  const Proc ok = run(kRun + " --steps 20 --profile-trace t.json --no-eval", dir.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(read_text(dir / "t.json")).is_object());
}

// A 64 KiB tmpfs mounted at `at` (a real full disk), unmounted when it goes; `error` says why it
// could not be mounted (this process may not mount), empty when it is.
struct SmallTmpfs {
  fs::path at;
  std::string error;
  explicit SmallTmpfs(fs::path where) : at(std::move(where)) {
    fs::create_directory(at);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, "size=64k") != 0) error = std::strerror(errno);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  ~SmallTmpfs() {
    if (error.empty()) ::umount2(at.c_str(), MNT_DETACH);
  }
};

// A real full disk: a 64 KiB tmpfs (skipped where this process may not mount one).
TEST(Integrity, FullTmpfsDuringInspectAndTrace) {
  TempDir dir;
  const SmallTmpfs small(dir / "small");
  if (!small.error.empty()) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << small.error
                 << "); the RLIMIT_FSIZE cases above cover a full disk";
  }
  const Proc r =
      run(kRun + " --steps 2000 --inspect every=1,out=small/insp.jsonl --no-eval", dir.path());
  expect_clear_error(r, "small/insp.jsonl: " + std::string(std::strerror(ENOSPC)));
  expect_whole_json_lines(read_text(dir / "small" / "insp.jsonl"));
  fs::remove(dir / "small" / "insp.jsonl");
  // Filled by a file of 60 KiB, the tmpfs has no room for the trace.
  test::write_bytes(dir / "small" / "fill", std::vector<uint8_t>(60 * 1024, 1));
  const Proc t = run(kRun + " --steps 20 --profile-trace small/t.json --no-eval", dir.path());
  expect_clear_error(t, std::strerror(ENOSPC));
  EXPECT_FALSE(fs::exists(dir / "small" / "t.json"));
  EXPECT_EQ(entries(dir / "small"), std::vector<std::string>{"fill"});
}

TEST(Integrity, FullDiskDuringStudyKeepsThePreviousStudyWhole) {
  TempDir dir;
  const std::string study =
      "compare --model mlp --data synthetic --train-limit 256 --test-limit 64 "
      "--steps 3 --precisions fp32,bf16 --out st --seed ";
  ASSERT_EQ(run(study + "1", dir.path()).exit_code, 0);
  std::vector<std::string> old;
  for (const char* f : {"results.json", "results.csv", "report.md", "report.html"}) {
    old.push_back(read_text(dir / "st" / f));
  }
  // report.html (the largest, with its charts) cannot be written: nothing of the new study shows.
  const auto html_size = fs::file_size(dir / "st" / "report.html");
  const Proc r = run(study + "2", dir.path(), rlim_t(html_size / 2));
  expect_clear_error(r);
  int i = 0;
  for (const char* f : {"results.json", "results.csv", "report.md", "report.html"}) {
    EXPECT_EQ(read_text(dir / "st" / f), old[size_t(i++)]) << f << " is from the new study";
  }
  EXPECT_FALSE(any_staging_left(dir.path(), "st"));
}

TEST(Integrity, FullTmpfsDuringSave) {
  TempDir dir;
  const SmallTmpfs small(dir / "small");
  if (!small.error.empty()) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << small.error
                 << "); the RLIMIT_FSIZE cases above cover a full disk";
  }
  const Proc first = run(kRun + " --steps 2 --save small/ck --no-eval", dir.path());
  // 64 KiB hold one checkpoint (~52 KB of model) but not a second beside it while staging.
  if (first.exit_code == 0) {
    const std::string before = read_text(dir / "small" / "ck" / train::kStateFile);
    const Proc second = run(kRun + " --steps 4 --save small/ck --no-eval", dir.path());
    expect_clear_error(second, "disk is full");
    EXPECT_EQ(read_text(dir / "small" / "ck" / train::kStateFile), before);
    EXPECT_NO_THROW(train::read_checkpoint(dir / "small" / "ck"));
  } else {
    expect_clear_error(first, "disk is full");
    EXPECT_FALSE(fs::exists(dir / "small" / "ck"));
  }
  EXPECT_FALSE(any_staging_left(dir / "small", "ck"));
}

}  // namespace
}  // namespace mixp
