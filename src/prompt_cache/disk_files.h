// The files of a prompt cache namespace, <dir>/<arch>-<root>/ (docs/formats/prompt_cache.md):
// their names, the index lock, whole-file reads. Shared by the cache's disk tier (prompt_cache.cc)
// and `mnemo cache` (cache_dir.cc); not part of the library's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::prompt_cache {

inline constexpr const char* kIndexName = "index.json";
inline constexpr const char* kLockName = ".lock";
inline constexpr const char* kEntrySuffix = ".state";
// Temporary files (an entry or the index being written) older than this are left-overs of a
// process that died mid-write; younger ones may be a write in flight.
inline constexpr auto kStaleTemp = std::chrono::minutes(10);

/// "<16 hex digits of key>.state".
std::string entry_file_name(uint64_t key);

/// The key an entry file's name claims, or nullopt for a name that is not "<16 hex>.state".
std::optional<uint64_t> key_of_file_name(const std::string& name);

/// True for a temporary file's name ("<name>.tmp.<pid>", FileSink's).
bool is_temp_file_name(const std::string& name);

/// An exclusive advisory lock on a file (flock(2), the file created when missing), released by
/// the destructor. Serializes the index updates of several servers sharing one namespace.
class FileLock {
 public:
  /// Waits for the lock; ok() is false when the file cannot be opened or locked.
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// A flock(2) on a namespace directory telling whether a server uses it: an open cache with a
/// disk tier holds it shared for as long as it is open; `mnemo cache clear` takes it exclusive,
/// without waiting, before it deletes a namespace whole (docs/formats/prompt_cache.md). Independent
/// of the index's FileLock (another file). Released by the destructor.
class DirLock {
 public:
  DirLock() = default;
  ~DirLock();
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  /// Locks the existing directory `dir` shared, waiting while a clear holds it. Errors:
  /// kNotFound when `dir` is missing or was removed meanwhile (by that clear: create it again and
  /// retry), kIOError.
  static Result<DirLock> shared(const std::string& dir);
  /// Locks `dir` exclusive if no one holds it; a lock that is not held() when a server does.
  /// Errors: kIOError.
  static Result<DirLock> try_exclusive(const std::string& dir);
  bool held() const { return fd_ >= 0; }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Makes the names in directory `dir` durable: fsync(2) of the directory, so that a rename into
/// it survives a crash of the machine (POSIX leaves that to the directory's own sync).
/// Errors: kIOError naming the OS reason.
Status sync_dir(const std::string& dir);

/// Reads a whole file. Errors: kNotFound when it does not exist, kIOError.
Result<std::shared_ptr<std::vector<uint8_t>>> read_whole_file(const std::string& path);

}  // namespace mnemo::prompt_cache
