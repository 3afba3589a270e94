// Atomic file and directory writes: a reader (or a crash) sees either the old content or the
// complete new content, never a half-written file, so a failure leaves no partial output files
// (docs/architecture.md 4.1).
//
// Files: the bytes go to a temporary sibling `<name>.tmp-XXXXXX` in the destination's directory
// (same filesystem, so rename(2) is atomic), which is fsync'ed, closed and renamed over the
// destination; the directory is then fsync'ed so the rename itself survives a power cut. On any
// failure the temporary is removed and the destination is left exactly as it was.
//
// Directories (checkpoints): files are built inside `<dir>.tmp-XXXXXX`, then swapped into place.
// Where the kernel and filesystem support renameat2(RENAME_EXCHANGE), an existing `<dir>` is
// exchanged with the new one in one atomic step and the old content is then deleted. Otherwise the
// old `<dir>` is renamed aside to `<dir>.old-XXXXXX`, the new one renamed in, and the old one
// deleted; a crash between those two renames leaves no `<dir>` but the previous one intact under
// `<dir>.old-XXXXXX` (rename it back to recover). A failure of the second rename puts the old one
// back before the error is reported.
//
// Locking: a folder being written is locked (FolderLock below: an advisory flock(2) on the lock
// file `<dir>.lock` next to it), so a second writer fails at once with a clear message instead of
// "last writer wins". AtomicDirectory takes the lock itself for the time of one write; a long
// writer (the Trainer's --save, `mixp compare --out`) holds one for its whole run. When a process
// takes a folder's lock (and no thread of it held it already), it removes what a killed writer
// left next to the folder: `<dir>.tmp-XXXXXX` staging folders, and `<dir>.old-XXXXXX` (renamed
// back to `<dir>` when `<dir>` itself is missing: the crash fell between the two renames).
//
// Linux/POSIX only. Symlinks: the link itself is replaced, not its target.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace mixp {

// A filesystem operation failed. The message names the operation, the path, the OS reason
// (strerror) and, where there is one, what to do.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Another process holds the folder's lock (FolderLock).
class FolderBusyError : public IoError {
 public:
  using IoError::IoError;
};

// An exclusive advisory lock on a folder that is being written: flock(LOCK_EX | LOCK_NB) on
// `<dir>.lock` (created, mode 0666 & ~umask; it holds the owner's pid for the error message, and
// is removed again on release). Re-entrant within one process: a second FolderLock on the same
// folder (any thread) shares the first one, and the lock is released with the last of them.
// Readers take no lock: they verify what they read instead (io/manifest.h).
class FolderLock {
 public:
  // Throws FolderBusyError when another process holds the lock ("cannot write 'ck': another
  // process (pid N) is writing it ..."), IoError when the lock file cannot be created. On a fresh
  // acquisition, removes the stale siblings described at the top of this file.
  explicit FolderLock(const std::filesystem::path& dir);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  // Releases now (the destructor does it too). Never throws.
  void release() noexcept;
  // `<dir>.lock`.
  const std::filesystem::path& lock_file() const { return lock_file_; }

 private:
  std::filesystem::path lock_file_;
  bool held_ = false;
};

// Writes one file atomically. Usage:
//   AtomicFileWriter w(path);   // creates the temporary (throws IoError if it cannot)
//   w.write(bytes); ...         // buffered; throws IoError on a write error (e.g. disk full)
//   w.commit();                 // flush, fsync, rename over `path`, fsync the directory
// If commit() is not reached (an exception, an early return) the destructor removes the
// temporary and `path` is untouched. New files get mode 0666 & ~umask, like open(2) would.
class AtomicFileWriter {
 public:
  // Throws IoError when `path` is an existing directory, when its parent directory does not
  // exist, or when the temporary cannot be created (permissions, read-only filesystem).
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Makes the file visible under path(). Afterwards the writer is finished; write() throws.
  void commit();
  // Removes the temporary now (the destructor does this too). Never throws.
  void abort() noexcept;

  const std::filesystem::path& path() const { return path_; }
  // The temporary being written (empty after commit()/abort()); for tests and diagnostics.
  const std::filesystem::path& temp_path() const { return temp_; }
  bool committed() const { return committed_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void flush_buffer();
  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::vector<std::byte> buffer_;  // small writes are batched; large ones go straight through
};

// One-shot helpers built on AtomicFileWriter.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_text_atomic(const std::filesystem::path& path, std::string_view text);
// Streams through `fill`; if `fill` throws, the temporary is removed and the exception propagates
// unchanged (the destination is untouched).
void write_file_atomic_with(const std::filesystem::path& path,
                            const std::function<void(AtomicFileWriter&)>& fill);

// Builds a directory atomically (checkpoints: model + optimizer + scaler + RNG files). Usage:
//   AtomicDirectory d(target);                       // creates <target>.tmp-XXXXXX
//   write_file_atomic(d.file("model.safetensors"), ...);  // or any plain writes into d.staging()
//   d.commit();                                      // fsync everything, swap into place
// The destructor removes the staging directory (recursively) if commit() was not reached.
// New directories get mode 0777 & ~umask. The target's FolderLock is held from the constructor
// until commit() or abort() (so a second process writing the same folder fails at once).
class AtomicDirectory {
 public:
  // Throws IoError when `target` exists and is not a directory, when its parent does not exist,
  // or when the staging directory cannot be created; FolderBusyError when another process holds
  // the target's lock.
  explicit AtomicDirectory(std::filesystem::path target);
  ~AtomicDirectory();
  AtomicDirectory(AtomicDirectory&& other) noexcept;
  AtomicDirectory& operator=(AtomicDirectory&& other) noexcept;
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  // The path of `name` (relative, may contain subdirectories, no "..") inside the staging
  // directory; write your files there. Throws IoError for an absolute name or one with "..".
  std::filesystem::path file(std::string_view name) const;
  const std::filesystem::path& staging() const { return staging_; }
  const std::filesystem::path& target() const { return target_; }
  // fsyncs every file and directory under staging(), then replaces target() (see the top of this
  // file for how an existing target is replaced) and fsyncs the parent directory.
  void commit();
  // Removes the staging directory now. Never throws.
  void abort() noexcept;
  bool committed() const { return committed_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool committed_ = false;
  std::unique_ptr<FolderLock> lock_;
};

// Streams through `fill(staging_dir)`; on an exception the staging directory is removed, the
// target is untouched and the exception propagates.
void write_directory_atomic(const std::filesystem::path& target,
                            const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace mixp
