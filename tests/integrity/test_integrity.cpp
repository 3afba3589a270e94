// Fault injection (issue 18): kill -9 during saves, a resume concurrent with saves into the same
// folder, corrupted checkpoints, a gzip bomb, and fuzzed safetensors and IDX files. Every case
// must end in a clear error or a correct result, never exit 0 with wrong numbers. A full disk:
// test_full_disk.cpp; running the CLI as a child: integrity_util.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/temp_dir.h"
#include "integrity/integrity_util.h"
#include "io/io_util.h"
#include "mixp/data/error.h"
#include "mixp/data/idx.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/manifest.h"
#include "mixp/io/safetensors.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/trainer.h"

namespace mixp {
namespace {

namespace fs = std::filesystem;
using test::read_text;
using test::TempDir;
using test::write_text;
using namespace integrity;

// ---------------------------------------------------------------------------------------------
// kill -9 during saves

TEST(Integrity, KillDuringSaveNeverLeavesAHalfCheckpoint) {
  TempDir dir;
  std::mt19937 rng(18);
  const std::string writer = kRun + " --steps 2000 --save-every 1 --save ck --no-eval";
  int verified = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const pid_t pid = spawn(writer, dir.path(), dir / "wout", dir / "werr");
    std::this_thread::sleep_for(std::chrono::milliseconds(250 + rng() % 900));
    ::kill(pid, SIGKILL);
    (void)wait_run(pid, dir / "wout", dir / "werr");
    if (!fs::exists(dir / "ck")) continue;  // killed before the first save finished
    // Whatever the moment, the folder is one complete, verified save.
    const train::CheckpointFiles ck = train::read_checkpoint(dir / "ck");
    EXPECT_TRUE(ck.verified());
    ++verified;
  }
  EXPECT_GT(verified, 0) << "no kill landed after a save; the machine is very slow";
  // The next save removes what the killed ones left beside the folder.
  fs::create_directory(dir / "ck.tmp-zz9zz9");  // as a killed save leaves it
  const Proc next = run(kRun + " --steps 3 --save ck --no-eval --json", dir.path());
  ASSERT_EQ(next.exit_code, 0) << next.err;
  EXPECT_FALSE(any_staging_left(dir.path(), "ck")) << testing::PrintToString(entries(dir.path()));
  EXPECT_FALSE(fs::exists(dir / "ck.lock"));
}

// ---------------------------------------------------------------------------------------------
// A resume while another process saves into the same folder

TEST(Integrity, ResumeConcurrentWithSavesIsBitIdenticalOrAClearError) {
  TempDir dir;
  const int steps = 1500;
  const Proc ref =
      run(kRun + " --steps " + std::to_string(steps) + " --no-eval --json --save ref", dir.path());
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const double want = final_loss(ref);
  // The final weights and optimizer state, by their checksums in the manifest.
  auto sums = [&](const std::string& ck) {
    const auto m = nlohmann::json::parse(read_text(dir / ck / kManifestFile));
    return m["files"]["model.safetensors"]["crc32"].get<std::string>() +
           m["files"]["optimizer.safetensors"]["crc32"].get<std::string>();
  };
  const std::string want_sums = sums("ref");

  const pid_t writer = spawn(kRun + " --steps 100000 --save-every 1 --save same --no-eval",
                             dir.path(), dir / "wout", dir / "werr");
  while (!fs::exists(dir / "same")) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int ok = 0;
  for (int i = 0; i < 8; ++i) {
    // While `same` is replaced every step, resume from it to the same length as the reference.
    const Proc r =
        run(kRun + " --resume same --steps " + std::to_string(steps) + " --no-eval --json --save r",
            dir.path());
    if (r.exit_code == 0) {
      ++ok;
      EXPECT_EQ(final_loss(r), want) << "a resume read a mix of two saves";
      EXPECT_EQ(sums("r"), want_sums) << "a resume read a mix of two saves";
    } else {
      // Only allowed: the writer had passed the run's length already.
      expect_clear_error(r, "beyond this run's");
    }
  }
  ::kill(writer, SIGKILL);
  (void)wait_run(writer, dir / "wout", dir / "werr");
  EXPECT_GT(ok, 0);
}

TEST(Integrity, ReadsDuringSavesNeverMixTwoSaves) {
  // In-process readers against a writer process: every read succeeds (a folder replaced during a
  // read is read again) and is one save: state.json's step is the optimizer's.
  TempDir dir;
  const pid_t writer = spawn(kRun + " --steps 100000 --save-every 1 --save same --no-eval",
                             dir.path(), dir / "wout", dir / "werr");
  while (!fs::exists(dir / "same")) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int reads = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    const train::CheckpointFiles ck = train::read_checkpoint(dir / "same");
    const auto state = nlohmann::json::parse(ck.state_text);
    const SafeTensorsFile opt = ck.safetensors(train::kOptimizerFile);
    // Adam's per-parameter step counts live in state.json; its moments in the file: both from
    // one save, which the manifest vouches for.
    EXPECT_EQ(state["optimizer"]["state"]["step"].get<double>(),
              state["step"].get<double>() - state["skipped_steps"].get<double>());
    EXPECT_FALSE(opt.tensors.empty());
    ++reads;
  }
  ::kill(writer, SIGKILL);
  (void)wait_run(writer, dir / "wout", dir / "werr");
  EXPECT_GT(reads, 10);
}

// The same in one process at the io level, with both ways of replacing a folder (an exchange,
// and the fallback that renames the old folder aside first): two files written together are
// always read together.
class ReaderAgainstWriter : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { io_detail::disable_rename_exchange_for_tests() = GetParam(); }
  void TearDown() override { io_detail::disable_rename_exchange_for_tests() = false; }
};

TEST_P(ReaderAgainstWriter, NeverMixesTwoWrites) {
  TempDir dir;
  const fs::path target = dir / "folder";
  auto write = [&](int i) {
    write_directory_atomic(target, [&](const fs::path& staging) {
      write_text(staging / "a", std::to_string(i));
      write_text(staging / "b", std::to_string(i));
      write_folder_manifest(staging);
    });
  };
  write(0);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 1; i <= 150; ++i) write(i);
    done = true;
  });
  const std::vector<std::string> none;
  int reads = 0;
  std::string failure;
  while (!done && failure.empty()) {
    try {
      const VerifiedFolder f = read_verified_folder(target, none);
      if (!f.has_manifest) failure = "read without its manifest";
      if (f.find("a") == nullptr || f.find("b") == nullptr || *f.find("a") != *f.find("b")) {
        failure = "a and b from two writes";
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    ++reads;
  }
  writer.join();
  EXPECT_EQ(failure, "");
  EXPECT_GT(reads, 0);
}

INSTANTIATE_TEST_SUITE_P(ExchangeAndFallback, ReaderAgainstWriter, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "RenameAside" : "Exchange"; });

// ---------------------------------------------------------------------------------------------
// Locking

TEST(Integrity, ASecondWriterFailsAtStart) {
  TempDir dir;
  FolderLock held(dir / "ck");  // this process is writing ck
  const Proc r = run(kRun + " --steps 2 --save ck", dir.path());
  expect_clear_error(r, "another process (pid " + std::to_string(::getpid()) + ") is writing it");
  const Proc c =
      run("compare --model mlp --data synthetic --train-limit 256 "
          "--test-limit 64 --steps 2 --precisions fp32 --out ck",
          dir.path());
  expect_clear_error(c, "is writing it (it holds the lock file");
  held.release();
  EXPECT_FALSE(fs::exists(dir / "ck.lock"));
  const Proc ok = run(kRun + " --steps 2 --save ck --no-eval", dir.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// ---------------------------------------------------------------------------------------------
// Corrupted checkpoints

class Corruption : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const Proc r = run(kRun + " --steps 6 --save good --no-eval", dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // A fresh copy of the good checkpoint.
  fs::path copy(const std::string& name) {
    const fs::path to = dir_->path() / name;
    fs::remove_all(to);
    fs::copy(dir_->path() / "good", to, fs::copy_options::recursive);
    return to;
  }
  static std::vector<uint8_t> bytes(const fs::path& p) { return test::read_bytes(p); }
  // Every way of loading it fails with a clear error containing `needle`.
  void expect_refused(const fs::path& ck, const std::string& needle) {
    const std::string name = ck.filename().string();
    for (const std::string& args :
         {kRun + " --resume " + name + " --steps 8 --no-eval", "eval --checkpoint " + name,
          "quantize --checkpoint " + name + " --calibrate 1"}) {
      const Proc r = run(args, dir_->path());
      expect_clear_error(r, needle);
      EXPECT_NE(r.err.find(name), std::string::npos) << "the error names no file: " << r.err;
    }
  }
  static TempDir* dir_;
};
TempDir* Corruption::dir_ = nullptr;

// The data of a tensor in a .safetensors file: [begin, end) file offsets.
std::pair<size_t, size_t> tensor_span(const fs::path& file, const std::string& name) {
  const SafeTensorsHeader h = read_safetensors_header(file);
  for (const auto& t : h.tensors) {
    if (t.name == name) return {size_t(t.file_offset), size_t(t.file_offset + t.nbytes)};
  }
  ADD_FAILURE() << "no tensor " << name;
  return {0, 0};
}

void put_floats(const fs::path& file, size_t offset, float v, int count) {
  std::vector<uint8_t> b = test::read_bytes(file);
  for (int i = 0; i < count; ++i) std::memcpy(b.data() + offset + 4 * size_t(i), &v, 4);
  test::write_bytes(file, b);
}

TEST_F(Corruption, NaNInWeights) {
  const fs::path ck = copy("nan");
  const fs::path f = ck / train::kModelFile;
  put_floats(f, tensor_span(f, "fc1.weight").first, std::nanf(""), 100);
  expect_refused(ck, "tensor 'fc1.weight'");
  // Resealed (a manifest rewritten after the damage): the values themselves are refused.
  train::seal_checkpoint(ck);
  expect_refused(ck, "'fc1.weight' holds 100 NaN or infinite values");
  fs::remove(ck / kManifestFile);  // and a legacy checkpoint, without a manifest
  expect_refused(ck, "'fc1.weight' holds 100 NaN or infinite values");
}

TEST_F(Corruption, InfInOptimizerState) {
  const fs::path ck = copy("inf");
  const fs::path f = ck / train::kOptimizerFile;
  put_floats(f, tensor_span(f, "fc2.weight.exp_avg_sq").first, INFINITY, 3);
  train::seal_checkpoint(ck);
  const Proc r = run(kRun + " --resume inf --steps 8 --no-eval", dir_->path());
  expect_clear_error(r, "optimizer state 'fc2.weight.exp_avg_sq' holds 3 NaN or infinite values");
}

TEST_F(Corruption, DtypeRelabelled) {
  const fs::path ck = copy("i32");
  const fs::path f = ck / train::kModelFile;
  std::vector<uint8_t> b = bytes(f);
  std::string s(b.begin(), b.end());
  const std::string from = "\"fc1.weight\":{\"dtype\":\"F32\"";
  const auto at = s.find(from);
  ASSERT_NE(at, std::string::npos);
  s.replace(at, from.size(), "\"fc1.weight\":{\"dtype\":\"I32\"");
  test::write_bytes(f, std::vector<uint8_t>(s.begin(), s.end()));
  expect_refused(ck, "tensor 'fc1.weight' is stored as I32 but was saved as F32");
  train::seal_checkpoint(ck);
  expect_refused(ck, "'fc1.weight' is stored as I32 but the model's is fp32");
}

TEST_F(Corruption, BitFlips) {
  for (int seed = 0; seed < 5; ++seed) {
    const fs::path ck = copy("flip" + std::to_string(seed));
    const fs::path f = ck / train::kModelFile;
    std::vector<uint8_t> b = bytes(f);
    std::mt19937 rng{uint32_t(seed)};
    const size_t data = tensor_span(f, "fc1.weight").first;
    for (int i = 0; i < 16; ++i) b[data + rng() % (b.size() - data)] ^= uint8_t(1u << (rng() % 8));
    test::write_bytes(f, b);
    expect_refused(ck, "differ from what was saved");
  }
}

TEST_F(Corruption, SwappedOffsets) {
  const fs::path ck = copy("swap");
  const fs::path f = ck / train::kModelFile;
  SafeTensorsFile m = read_safetensors(f);
  // fc2.bias and head... pick two tensors of the same byte size and swap where their data lie.
  const SafeTensorsHeader h = read_safetensors_header(f);
  std::string a, b2;
  for (size_t i = 0; i < h.tensors.size() && a.empty(); ++i) {
    for (size_t j = i + 1; j < h.tensors.size(); ++j) {
      if (h.tensors[i].nbytes == h.tensors[j].nbytes) {
        a = h.tensors[i].name;
        b2 = h.tensors[j].name;
        break;
      }
    }
  }
  ASSERT_FALSE(a.empty());
  std::swap(m.find(a)->data, m.find(b2)->data);
  write_safetensors(f, m);
  expect_refused(ck, "the data of tensor '" + a + "' differ from what was saved");
}

TEST_F(Corruption, TruncatedAndMissingFiles) {
  const fs::path ck = copy("trunc");
  fs::resize_file(ck / train::kOptimizerFile, 100);
  expect_refused(ck, "optimizer.safetensors does not match");
  const fs::path ck2 = copy("missing");
  fs::remove(ck2 / train::kModelFile);
  expect_refused(ck2, "model.safetensors: missing");
}

// state.json damaged in place (the manifest catches it), then resealed (the strict reader must).
TEST_F(Corruption, StateJson) {
  struct Case {
    std::string name, from, to, needle;
  };
  const std::vector<Case> cases = {
      {"dup", "\"step\": 6,", "\"step\": 20, \"step\": 6,", "the key \"step\" appears twice"},
      {"huge", "\"step\": 6,", "\"step\": 1e300,", "\"step\" is 1e+300, not a whole number"},
      {"neg", "\"epoch\": 0,", "\"epoch\": -1,", "\"epoch\" is -1"},
      {"skips", "\"skipped_steps\": 0,", "\"skipped_steps\": 9,", "more steps skipped than taken"},
      {"contradict", "\"step\": 6,", "\"step\": 5,", "the file contradicts itself"},
      {"prec", "\"precision\": \"fp32\"", "\"precision\": \"fp16\"",
       "\"recipe.name\" is \"fp32\" but \"config.precision\" \"fp16\""},
      {"batch", "\"batch\": 16,", "\"batch\": 1e300,", "\"batch\" is 1e+300"},
      {"notjson", "{", "{{", "is not valid JSON"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path ck = copy("state_" + c.name);
    std::string s = read_text(ck / train::kStateFile);
    const auto at = s.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    s.replace(at, c.from.size(), c.to);
    write_text(ck / train::kStateFile, s);
    expect_refused(ck, "state.json does not match");
    train::seal_checkpoint(ck);
    const Proc r =
        run(kRun + " --resume " + ck.filename().string() + " --steps 8 --no-eval", dir_->path());
    expect_clear_error(r, c.needle);
    EXPECT_NE(r.err.find("state.json"), std::string::npos) << r.err;
  }
  // "data": null, and the data position contradicting the step.
  for (const auto& [name, edit, needle] :
       std::vector<std::tuple<std::string, std::function<void(nlohmann::json&)>, std::string>>{
           {"datanull", [](nlohmann::json& j) { j["data"] = nullptr; }, "\"data\" is null"},
           {"datapos", [](nlohmann::json& j) { j["data"]["position"] = 16 * 20; },
            "the data position says"},
           {"optstep", [](nlohmann::json& j) { j["optimizer"]["state"]["step"] = 20.0; },
            "\"optimizer.state.step\" is 20.0"}}) {
    SCOPED_TRACE(name);
    const fs::path ck = copy("state_" + name);
    auto j = nlohmann::json::parse(read_text(ck / train::kStateFile));
    edit(j);
    write_text(ck / train::kStateFile, j.dump(2));
    train::seal_checkpoint(ck);
    const Proc r =
        run(kRun + " --resume " + ck.filename().string() + " --steps 8 --no-eval", dir_->path());
    expect_clear_error(r, needle);
  }
}

TEST_F(Corruption, DamagedManifest) {
  const fs::path ck = copy("manifest");
  std::string m = read_text(ck / kManifestFile);
  write_text(ck / kManifestFile, m.substr(0, m.size() / 2));
  expect_refused(ck, "manifest.json: not valid JSON");
  const fs::path ck2 = copy("manifest2");
  auto j = nlohmann::json::parse(read_text(ck2 / kManifestFile));
  j["files"]["model.safetensors"]["crc32"] = "00000000";
  write_text(ck2 / kManifestFile, j.dump());
  expect_refused(ck2, "model.safetensors does not match");
}

TEST_F(Corruption, ConvertOfACheckpointFileIsVerified) {
  const fs::path ck = copy("conv");
  const fs::path f = ck / train::kModelFile;
  put_floats(f, tensor_span(f, "fc1.bias").first, 1.0f, 1);
  const Proc r = run("convert conv/model.safetensors --to bf16 -o out.safetensors", dir_->path());
  expect_clear_error(r, "conv/model.safetensors does not match");
}

// ---------------------------------------------------------------------------------------------
// Data

// An IDX file whose header says 10 images of 28x28 but whose gzip inflates to 256 MiB.
TEST(Integrity, IdxGzipBombIsStoppedAtTheDeclaredSize) {
  TempDir dir;
  const fs::path bomb = dir / "bomb-images-idx3-ubyte.gz";
  {
    gzFile g = gzopen(bomb.c_str(), "wb1");
    ASSERT_NE(g, nullptr);
    const uint8_t header[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    gzwrite(g, header, sizeof header);
    std::vector<uint8_t> zeros(1 << 20, 0);
    for (int i = 0; i < 256; ++i) gzwrite(g, zeros.data(), unsigned(zeros.size()));
    gzclose(g);
  }
  EXPECT_LT(fs::file_size(bomb), 2u << 20);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)data::read_idx(bomb);
    FAIL() << "a bomb was accepted";
  } catch (const data::DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(bomb.string()), std::string::npos) << m;
    EXPECT_NE(m.find("decompress to more than the 7856 bytes its IDX header declares"),
              std::string::npos)
        << m;
  }
  // Stopped after the header's 7856 bytes, not after inflating 256 MiB.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
}

TEST(Integrity, TestSetOfAnotherShapeIsFoundBeforeTraining) {
  TempDir dir;
  auto images = [&](const std::string& name, int64_t n, int64_t side) {
    std::vector<uint8_t> px(size_t(n * side * side), 7);
    const int64_t dims[] = {n, side, side};
    data::write_idx(dir / name, data::IdxType::u8, dims, px, false);
  };
  auto labels = [&](const std::string& name, int64_t n) {
    std::vector<uint8_t> l(size_t(n), 1);
    const int64_t dims[] = {n};
    data::write_idx(dir / name, data::IdxType::u8, dims, l, false);
  };
  images("train-images-idx3-ubyte", 64, 28);
  labels("train-labels-idx1-ubyte", 64);
  images("t10k-images-idx3-ubyte", 16, 20);
  labels("t10k-labels-idx1-ubyte", 16);
  const Proc r = run("train --model mlp --width 16 --data . --batch 16 --steps 100000 --threads 1",
                     dir.path());
  expect_clear_error(r, "are 20x20 pixels but the training images are 28x28");
  EXPECT_EQ(r.out.find("step"), std::string::npos) << "it trained first";
}

// ---------------------------------------------------------------------------------------------
// Fuzzing the readers: every input is either read or refused with the reader's own error type.

TEST(Integrity, FuzzSafetensorsReader) {
  SafeTensorsFile f;
  f.metadata["format"] = "mixp-checkpoint";
  for (int k = 0; k < 3; ++k) {
    SafeTensor t;
    t.name = "w" + std::to_string(k);
    t.dtype = k == 1 ? DType::bf16 : DType::fp32;
    t.shape = {3, int64_t(k + 1)};
    t.data.resize(size_t(3 * (k + 1) * (k == 1 ? 2 : 4)), std::byte{0x3c});
    f.tensors.push_back(t);
  }
  const std::vector<std::byte> good = serialize_safetensors(f);
  std::mt19937 rng(1818);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::byte> b = good;
    switch (i % 4) {
      case 0:  // random byte changes anywhere
        for (int n = 1 + int(rng() % 4); n > 0; --n) b[rng() % b.size()] = std::byte(rng());
        break;
      case 1:  // in the header only (digits, quotes, brackets)
        for (int n = 1 + int(rng() % 3); n > 0; --n) {
          static const char kChars[] = "0123456789\"{}[],:9e-.";
          b[8 + rng() % (b.size() - 8) % 200] = std::byte(kChars[rng() % (sizeof kChars - 1)]);
        }
        break;
      case 2:  // truncated or extended
        b.resize(rng() % (b.size() + 16), std::byte{0});
        break;
      default:  // the header-size field
        b[rng() % 8] = std::byte(rng());
        break;
    }
    try {
      const SafeTensorsFile p = parse_safetensors(b, "fuzz");
      for (const auto& t : p.tensors) {
        ASSERT_EQ(uint64_t(t.numel()) * uint64_t(traits(t.dtype).storage_bytes), t.data.size());
      }
      ++accepted;
    } catch (const SafeTensorsError& e) {
      ASSERT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(accepted, 0);  // data-only changes stay valid files
}

TEST(Integrity, FuzzIdxReader) {
  TempDir dir;
  std::vector<uint8_t> payload(5 * 4 * 3);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 7);
  const int64_t dims[] = {5, 4, 3};
  data::write_idx(dir / "raw", data::IdxType::u8, dims, payload, false);
  data::write_idx(dir / "gz", data::IdxType::u8, dims, payload, true);
  const std::vector<uint8_t> raw = test::read_bytes(dir / "raw");
  const std::vector<uint8_t> gz = test::read_bytes(dir / "gz");
  std::mt19937 rng(1819);
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    std::vector<uint8_t> b = (i % 2) ? gz : raw;
    if (i % 5 == 4) {
      b.resize(rng() % (b.size() + 8), 0);
    } else {
      for (int n = 1 + int(rng() % 3); n > 0; --n) b[rng() % b.size()] = uint8_t(rng());
    }
    test::write_bytes(dir / "f", b);
    try {
      const data::IdxArray a = data::read_idx(dir / "f");
      ASSERT_EQ(a.bytes.size() - a.payload_offset,
                size_t(a.element_count()) * data::idx_type_size(a.type));
    } catch (const data::DataError& e) {
      ASSERT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 300);
}

}  // namespace
}  // namespace mixp
