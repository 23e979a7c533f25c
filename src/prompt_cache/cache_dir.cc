#include "prompt_cache/cache_dir.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "mnemo/state.h"
#include "mnemo/state_io.h"
#include "prompt_cache/disk_files.h"

namespace mnemo::prompt_cache {

namespace fs = std::filesystem;

namespace {

// "<arch>-<16 hex digits>": a namespace the cache made.
bool is_namespace(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash == 0 || name.size() - dash - 1 != 16) return false;
  return std::all_of(name.begin() + dash + 1, name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_entry_file(const std::string& name) {
  const size_t n = std::strlen(kEntrySuffix);
  return name.size() > n && name.compare(name.size() - n, n, kEntrySuffix) == 0;
}

bool is_cache_file(const std::string& name) {
  return name == kIndexName || name == kLockName || is_temp_file_name(name) || is_entry_file(name);
}

Status check_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::not_found("'" + dir + "' is not a directory");
  return Status();
}

}  // namespace

Result<std::vector<DirEntry>> scan_cache_dir(const std::string& dir, bool verify) {
  MNEMO_RETURN_IF_ERROR(check_dir(dir));
  std::vector<DirEntry> out;
  std::error_code ec;
  for (const fs::directory_entry& ns : fs::directory_iterator(dir, ec)) {
    const std::string ns_name = ns.path().filename().string();
    if (!is_namespace(ns_name) || !ns.is_directory(ec)) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(ns.path(), ec)) {
      const std::string name = f.path().filename().string();
      if (!is_entry_file(name)) continue;
      DirEntry e;
      e.name = ns_name + "/" + name;
      e.bytes = f.file_size(ec);
      auto src = FileSource::open(f.path().string());
      if (!src.ok()) {
        e.status = src.status();
        out.push_back(std::move(e));
        continue;
      }
      std::vector<int32_t> tokens;
      auto info = state_inspect_tokens(src->get(), &tokens);
      if (!info.ok()) {
        e.status = info.status();
      } else {
        e.arch = info->model.arch;
        e.n_tokens = static_cast<uint32_t>(tokens.size());
        if (verify) {
          MNEMO_RETURN_IF_ERROR((*src)->seek(0));
          e.status = state_verify(src->get());
        }
      }
      out.push_back(std::move(e));
    }
  }
  if (ec) return Status::io_error("cannot list '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

namespace {

// Deletes the files of namespace `ns` that `wanted` picks; counts them into *n.
Status remove_files(const fs::path& ns, const std::function<bool(const fs::path&)>& wanted,
                    uint64_t* n) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const fs::directory_entry& f : fs::directory_iterator(ns, ec)) {
    if (is_cache_file(f.path().filename().string()) && wanted(f.path())) files.push_back(f.path());
  }
  for (const fs::path& f : files) {
    if (!fs::remove(f, ec) && ec) {
      return Status::io_error("cannot delete '" + f.string() + "': " + ec.message());
    }
    ++*n;
  }
  return Status();
}

// A temporary file no write is still making: older than kStaleTemp (a process died mid-write).
bool stale_temp(const fs::path& f) {
  std::error_code ec;
  const auto t = fs::last_write_time(f, ec);
  return !ec && fs::file_time_type::clock::now() - t > kStaleTemp;
}

}  // namespace

Result<ClearResult> clear_cache_dir(const std::string& dir) {
  MNEMO_RETURN_IF_ERROR(check_dir(dir));
  ClearResult r;
  std::error_code ec;
  std::vector<fs::path> namespaces;
  for (const fs::directory_entry& ns : fs::directory_iterator(dir, ec)) {
    if (is_namespace(ns.path().filename().string()) && ns.is_directory(ec)) {
      namespaces.push_back(ns.path());
    }
  }
  for (const fs::path& ns : namespaces) {
    MNEMO_ASSIGN_OR_RETURN(DirLock unused, DirLock::try_exclusive(ns.string()));
    if (unused.held()) {
      // No server uses it: everything goes, and the namespace when nothing else is there. A
      // server opening it meanwhile waits for this lock and then sees the directory gone.
      MNEMO_RETURN_IF_ERROR(remove_files(
          ns, [](const fs::path&) { return true; }, &r.removed));
      fs::remove(ns, ec);  // only when empty; anything else there is not the cache's
      ec.clear();
      continue;
    }
    // A server uses it: its entries and index go (it reads a missing entry's prompt again and
    // rewrites its index), under the index lock so that no index rewrite is half done; the lock
    // itself and temporaries a write may still rename into place stay.
    r.in_use.push_back(ns.filename().string());
    FileLock index_lock((ns / kLockName).string());
    if (!index_lock.ok())
      return Status::io_error("cannot lock '" + (ns / kLockName).string() + "'");
    MNEMO_RETURN_IF_ERROR(remove_files(
        ns,
        [](const fs::path& f) {
          const std::string name = f.filename().string();
          return name != kLockName && (!is_temp_file_name(name) || stale_temp(f));
        },
        &r.removed));
  }
  return r;
}

}  // namespace mnemo::prompt_cache
