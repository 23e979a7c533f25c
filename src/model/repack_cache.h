// The repack cache: a model's repacked weights (kernels::PackedMatrix, made at load) kept in a
// cache directory, so the next start maps them instead of packing again.
//
// One file per model file, SIMD target and packed-layout version, named by its key
// (repack_cache_key): <dir>/<key>.mnrp. Bytes (little-endian):
//   "MNRPACK1" | u32 format version (1) | u32 kernels::kPackedLayoutVersion | u32 key length |
//   key bytes | u64 n_entries | n_entries x entry { u64 offset, u64 bytes, i64 group_bytes,
//   i32 format, i32 layout, u64 xxh3 (of the entry's bytes) } | u64 xxh3 of everything before it
//   (the header checksum) | padding | each entry's bytes at its offset (64-byte aligned).
// An entry with bytes = 0 stands for a matrix pack_matrix left unpacked. The writer writes a
// temporary file, fsyncs it and renames it into place, so a reader never sees a partial file.
// A reader checks the header checksum and every entry's (threads split the entries) before
// handing out any byte: a damaged, truncated or foreign file is Corruption, and the caller
// packs again and replaces it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "mnemo/gguf.h"
#include "mnemo/status.h"
#include "mnemo/thread_pool.h"

namespace mnemo {

/// The key of a model file's repack cache: hex XXH3-128 of the GGUF header bytes (metadata and
/// tensor infos: [0, data_offset)), the file's size and modification time, the SIMD target, and
/// kernels::kPackedLayoutVersion. Another file, an edited file, another CPU kind or another
/// packing gives another key. `mtime_ns`: the file's st_mtim in nanoseconds.
std::string repack_cache_key(const gguf::File& file, int64_t mtime_ns);

/// A repack cache file mapped read-only: its entries' bytes stay valid while it lives.
class RepackCacheFile {
 public:
  /// Maps <dir>/<key>.mnrp and checks it (see the header comment). NotFound when absent,
  /// Corruption naming what is wrong (never a server path: the file is named by its key),
  /// IOError when it cannot be read.
  static Result<std::unique_ptr<RepackCacheFile>> open(const std::string& dir,
                                                       const std::string& key, ThreadPool* pool);
  ~RepackCacheFile();
  RepackCacheFile(const RepackCacheFile&) = delete;
  RepackCacheFile& operator=(const RepackCacheFile&) = delete;
  /// The entries, in the order they were written; data points into the mapping.
  std::span<const kernels::PackedImage> images() const { return images_; }

 private:
  RepackCacheFile() = default;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<kernels::PackedImage> images_;
};

/// Writes `images` as <dir>/<key>.mnrp (creating dir), atomically (a temporary file, fsync,
/// rename, fsync of the directory). IOError naming the step when it fails; nothing is left
/// behind then.
Status write_repack_cache(const std::string& dir, const std::string& key,
                          std::span<const kernels::PackedImage> images);

}  // namespace mnemo
