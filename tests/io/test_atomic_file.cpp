// Atomic file and directory writes: content lands whole, failures leave nothing behind and do not
// touch an existing destination.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <stdexcept>

#include "io/io_util.h"
#include "common/temp_dir.h"
#include "mixp/io/atomic_file.h"

namespace mixp {
namespace {

using test::read_text;
using test::TempDir;
using test::write_text;
using ::testing::HasSubstr;
using Names = std::set<std::string>;

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

struct InjectedFailure : std::runtime_error {
  InjectedFailure() : std::runtime_error("injected failure") {}
};

TEST(AtomicFile, WritesNewFileAndLeavesNoTemporary) {
  TempDir dir;
  write_file_atomic(dir / "a.bin", as_bytes("hello"));
  EXPECT_EQ(read_text(dir / "a.bin"), "hello");
  EXPECT_EQ(dir.entries(), Names({"a.bin"}));
}

TEST(AtomicFile, ReplacesExistingFile) {
  TempDir dir;
  write_text(dir / "a.txt", "old content that is longer");
  write_text_atomic(dir / "a.txt", "new");
  EXPECT_EQ(read_text(dir / "a.txt"), "new");
  EXPECT_EQ(dir.entries(), Names({"a.txt"}));
}

TEST(AtomicFile, EmptyFile) {
  TempDir dir;
  write_text_atomic(dir / "empty", "");
  EXPECT_TRUE(std::filesystem::exists(dir / "empty"));
  EXPECT_EQ(std::filesystem::file_size(dir / "empty"), 0u);
}

TEST(AtomicFile, MixedSmallAndLargeWritesKeepOrder) {
  TempDir dir;
  std::string expected;
  write_file_atomic_with(dir / "big", [&](AtomicFileWriter& w) {
    for (int i = 0; i < 50; ++i) {
      std::string chunk(static_cast<size_t>(i * 997 % 70000 + 1), static_cast<char>('a' + i % 26));
      expected += chunk;
      w.write(chunk);
    }
    EXPECT_EQ(w.bytes_written(), expected.size());
  });
  EXPECT_EQ(read_text(dir / "big"), expected);
}

TEST(AtomicFile, ExceptionMidWriteLeavesNothing) {
  TempDir dir;
  EXPECT_THROW(write_file_atomic_with(dir / "out.bin",
                                      [](AtomicFileWriter& w) {
                                        w.write(std::string(200000, 'x'));  // some of it on disk
                                        EXPECT_TRUE(std::filesystem::exists(w.temp_path()));
                                        throw InjectedFailure();
                                      }),
               InjectedFailure);
  EXPECT_EQ(dir.entries(), Names{});
}

TEST(AtomicFile, ExceptionMidWriteKeepsExistingDestination) {
  TempDir dir;
  write_text(dir / "out.bin", "precious");
  EXPECT_THROW(write_file_atomic_with(dir / "out.bin",
                                      [](AtomicFileWriter& w) {
                                        w.write(std::string("partial"));
                                        throw InjectedFailure();
                                      }),
               InjectedFailure);
  EXPECT_EQ(read_text(dir / "out.bin"), "precious");
  EXPECT_EQ(dir.entries(), Names({"out.bin"}));
}

TEST(AtomicFile, DestructorWithoutCommitRemovesTemporary) {
  TempDir dir;
  write_text(dir / "f", "old");
  {
    AtomicFileWriter w(dir / "f");
    w.write(std::string("new"));
    EXPECT_EQ(dir.entries().size(), 2u);  // f and its temporary
  }
  EXPECT_EQ(dir.entries(), Names({"f"}));
  EXPECT_EQ(read_text(dir / "f"), "old");
}

TEST(AtomicFile, MoveTransfersOwnership) {
  TempDir dir;
  AtomicFileWriter a(dir / "f");
  a.write(std::string("x"));
  AtomicFileWriter b(std::move(a));
  a = AtomicFileWriter(dir / "g");  // the moved-from writer owns nothing; reassigning is fine
  b.write(std::string("y"));
  b.commit();
  a.abort();
  EXPECT_EQ(read_text(dir / "f"), "xy");
  EXPECT_EQ(dir.entries(), Names({"f"}));
}

TEST(AtomicFile, UseAfterCommitIsAnError) {
  TempDir dir;
  AtomicFileWriter w(dir / "f");
  w.commit();
  EXPECT_TRUE(w.committed());
  EXPECT_THROW(w.write(std::string("x")), IoError);
  EXPECT_THROW(w.commit(), IoError);
  EXPECT_EQ(read_text(dir / "f"), "");
}

TEST(AtomicFile, MissingParentDirectoryIsReportedAndCreatesNothing) {
  TempDir dir;
  try {
    write_text_atomic(dir / "no" / "such" / "f.txt", "x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
    EXPECT_THAT(e.what(), HasSubstr("no/such"));
  }
  EXPECT_EQ(dir.entries(), Names{});
}

TEST(AtomicFile, DestinationThatIsADirectoryIsRefused) {
  TempDir dir;
  std::filesystem::create_directory(dir / "d");
  EXPECT_THROW(write_text_atomic(dir / "d", "x"), IoError);
  EXPECT_EQ(dir.entries(), Names({"d"}));
}

TEST(AtomicFile, FailedRenameRemovesTemporaryAndKeepsDestination) {
  TempDir dir;
  AtomicFileWriter w(dir / "target");
  w.write(std::string("data"));
  // After the writer started, something else puts a non-empty directory at the destination:
  // rename(2) of a file onto a directory fails with EISDIR.
  std::filesystem::create_directory(dir / "target");
  write_text(dir / "target" / "keep", "k");
  EXPECT_THROW(w.commit(), IoError);
  EXPECT_EQ(dir.entries(), Names({"target"}));
  EXPECT_EQ(read_text(dir / "target" / "keep"), "k");
}

TEST(AtomicFile, UnwritableDirectoryIsReported) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  std::filesystem::permissions(
      dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  try {
    write_text_atomic(dir / "ro" / "f", "x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Permission denied"));
  }
  std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_all);
  EXPECT_EQ(dir.entries("ro"), Names{});
}

// A write error from the OS half-way through (as on a full disk), simulated for any user, root
// included, with a file-size limit: write(2) fails with EFBIG once the temporary reaches it.
TEST(AtomicFile, OsWriteErrorMidFileLeavesNothingAndKeepsDestination) {
  TempDir dir;
  write_text(dir / "out.bin", "precious");
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the process is killed
  struct rlimit small = old_limit;
  small.rlim_cur = 100000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    write_file_atomic(dir / "out.bin", as_bytes(std::string(1 << 20, 'z')));
  } catch (const IoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(error, HasSubstr("cannot write"));
  EXPECT_THAT(error, HasSubstr("File too large"));
  EXPECT_EQ(read_text(dir / "out.bin"), "precious");
  EXPECT_EQ(dir.entries(), Names({"out.bin"}));
}

TEST(AtomicFile, NewFileModeFollowsUmask) {
  TempDir dir;
  const mode_t old = ::umask(027);
  write_text_atomic(dir / "f", "x");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(AtomicFile, ErrorMessagesStayOnOneLine) {
  TempDir dir;
  try {
    write_text_atomic(dir / "bad\nname" / "f", "x");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_EQ(std::strchr(e.what(), '\n'), nullptr) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("bad\\x0aname"));
  }
}

// ---------------------------------------------------------------------------------------------

class AtomicDirectoryTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { io_detail::disable_rename_exchange_for_tests() = GetParam(); }
  void TearDown() override { io_detail::disable_rename_exchange_for_tests() = false; }
};

TEST_P(AtomicDirectoryTest, CreatesNewDirectory) {
  TempDir dir;
  AtomicDirectory d(dir / "ckpt");
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt"));
  write_text_atomic(d.file("model.safetensors"), "m");
  std::filesystem::create_directory(d.file("sub"));
  write_text(d.file("sub/state.json"), "{}");  // plain writes are fsync'ed by commit()
  d.commit();
  EXPECT_TRUE(d.committed());
  EXPECT_EQ(dir.entries(), Names({"ckpt"}));
  EXPECT_EQ(dir.entries("ckpt"), Names({"model.safetensors", "sub"}));
  EXPECT_EQ(read_text(dir / "ckpt" / "sub" / "state.json"), "{}");
}

TEST_P(AtomicDirectoryTest, ReplacesExistingDirectoryAndRemovesTheOldOne) {
  TempDir dir;
  std::filesystem::create_directory(dir / "ckpt");
  write_text(dir / "ckpt" / "old_only", "o");
  write_text(dir / "ckpt" / "model", "old");
  write_directory_atomic(dir / "ckpt", [](const std::filesystem::path& staging) {
    write_text(staging / "model", "new");
  });
  EXPECT_EQ(dir.entries(), Names({"ckpt"}));  // no .tmp-* or .old-* left
  EXPECT_EQ(dir.entries("ckpt"), Names({"model"}));
  EXPECT_EQ(read_text(dir / "ckpt" / "model"), "new");
}

TEST_P(AtomicDirectoryTest, ExceptionLeavesExistingDirectoryUntouched) {
  TempDir dir;
  std::filesystem::create_directory(dir / "ckpt");
  write_text(dir / "ckpt" / "model", "old");
  EXPECT_THROW(write_directory_atomic(dir / "ckpt",
                                      [](const std::filesystem::path& staging) {
                                        write_text(staging / "model", "half");
                                        throw InjectedFailure();
                                      }),
               InjectedFailure);
  EXPECT_EQ(dir.entries(), Names({"ckpt"}));
  EXPECT_EQ(read_text(dir / "ckpt" / "model"), "old");
}

TEST_P(AtomicDirectoryTest, ExceptionWithoutExistingTargetLeavesNothing) {
  TempDir dir;
  EXPECT_THROW(write_directory_atomic(
                   dir / "ckpt", [](const std::filesystem::path&) { throw InjectedFailure(); }),
               InjectedFailure);
  EXPECT_EQ(dir.entries(), Names{});
}

INSTANTIATE_TEST_SUITE_P(ExchangeAndFallback, AtomicDirectoryTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "RenameAside" : "Exchange"; });

TEST(AtomicDirectory, TargetThatIsAFileIsRefused) {
  TempDir dir;
  write_text(dir / "ckpt", "a file");
  EXPECT_THROW(AtomicDirectory(dir / "ckpt"), IoError);
  EXPECT_EQ(read_text(dir / "ckpt"), "a file");
  EXPECT_EQ(dir.entries(), Names({"ckpt"}));
}

TEST(AtomicDirectory, TrailingSlashNamesTheSameDirectory) {
  TempDir dir;
  write_directory_atomic(dir.path() / "ckpt" / "", [](const std::filesystem::path& staging) {
    write_text(staging / "x", "1");
  });
  EXPECT_EQ(dir.entries(), Names({"ckpt"}));
}

TEST(AtomicDirectory, FileNamesMayNotEscapeTheStagingDirectory) {
  TempDir dir;
  AtomicDirectory d(dir / "ckpt");
  EXPECT_THROW(d.file("../evil"), IoError);
  EXPECT_THROW(d.file("/etc/passwd"), IoError);
  EXPECT_THROW(d.file(""), IoError);
  EXPECT_EQ(d.file("a/b"), d.staging() / "a" / "b");
}

TEST(AtomicDirectory, AbortRemovesStaging) {
  TempDir dir;
  AtomicDirectory d(dir / "ckpt");
  write_text(d.file("x"), "1");
  d.abort();
  EXPECT_EQ(dir.entries(), Names{});
  EXPECT_THROW(d.commit(), IoError);
}

}  // namespace
}  // namespace mixp
