// A prompt cache directory seen from outside a server (`mnemo cache list | verify | clear`):
// every namespace (one per model: "<arch>-<16 hex digits>") and its entry files, as laid out in
// docs/formats/prompt_cache.md. Safe to run while a server uses the directory: entries are only
// read, or deleted (a server that then misses a file reads the prompt again); the lock of a
// namespace a server uses, and files it may still be writing, are never deleted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::prompt_cache {

/// One entry file.
struct DirEntry {
  std::string name;       // "<namespace>/<16 hex>.state", relative to the cache directory
  std::string arch;       // the model architecture its header names ("" when unreadable)
  uint64_t bytes = 0;     // file size
  uint32_t n_tokens = 0;  // tokens it holds
  Status status;          // OK, or why the entry is unusable (header, token list, checksums)
};

/// Lists the entry files under `dir`, sorted by name. With verify, reads every file whole and
/// checks every section's checksum (state_verify); otherwise only the header and token list.
/// Errors: kNotFound when dir does not exist, kIOError when it cannot be listed.
Result<std::vector<DirEntry>> scan_cache_dir(const std::string& dir, bool verify);

/// What clear_cache_dir did.
struct ClearResult {
  uint64_t removed = 0;             // files deleted
  std::vector<std::string> in_use;  // namespaces a running server holds (kept, with its files)
};

/// Deletes the prompt cache under `dir`, nothing else. A namespace no server uses (its DirLock,
/// disk_files.h, is free): every entry file, index, lock and temporary file, then the namespace
/// when it is left empty. A namespace a server uses: its entry files and index (under the index
/// lock) and temporaries older than 10 minutes; its lock, the namespace and younger temporaries
/// (writes in flight) stay. Errors: kNotFound when dir does not exist, kIOError naming what could
/// not be deleted.
Result<ClearResult> clear_cache_dir(const std::string& dir);

}  // namespace mnemo::prompt_cache
