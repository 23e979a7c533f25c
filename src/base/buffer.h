// AlignedBuffer: a page-aligned, zero-initialized byte buffer mapped straight from the operating
// system (anonymous mmap), so that destroying it returns the pages to the OS at once.
//
// Used for large, long-lived storage (K/V tensors: src/memory/kv_cache.h) where "memory
// actually shrinks when a buffer is freed" is a requirement (docs/design.md §3.7, invariant 6);
// malloc may keep freed blocks in its arenas, munmap does not.
//
// Ownership: move-only; the mapping is released in the destructor or by reset(). Not
// thread-safe; the bytes themselves may be read and written from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mnemo/status.h"

namespace mnemo {

class AlignedBuffer {
 public:
  /// Alignment of data(): every mapping starts on a page boundary (at least this many bytes).
  static constexpr size_t kAlignment = 4096;
  /// Buffers of at least this many bytes ask for transparent huge pages (MADV_HUGEPAGE).
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  /// An empty buffer (size 0, data() == nullptr).
  AlignedBuffer() = default;
  ~AlignedBuffer();

  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  /// Maps `bytes` zero-filled bytes (bytes == 0 gives an empty buffer). The mapping is rounded up
  /// to whole pages; mapped_bytes() tells how much. From kHugePageBytes on, Linux is advised to
  /// back it with transparent huge pages. Errors: kNoSpace when the OS refuses
  /// ("mmap of N bytes failed: <strerror>").
  static Result<AlignedBuffer> allocate(size_t bytes);

  /// A deep copy (new mapping, same bytes). Errors as allocate().
  Result<AlignedBuffer> copy() const;

  /// Unmaps the buffer now; afterwards size() == 0.
  void reset();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  /// Bytes requested at allocate().
  size_t size() const { return size_; }
  /// Bytes actually mapped (size() rounded up to whole pages; 0 when empty).
  size_t mapped_bytes() const { return mapped_; }
  bool empty() const { return size_ == 0; }

  std::span<uint8_t> bytes() { return {data_, size_}; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

/// This machine's physical memory in bytes (sysconf _SC_PHYS_PAGES x _SC_PAGESIZE), or 0 where
/// the system does not report it.
size_t physical_memory_bytes();

}  // namespace mnemo
