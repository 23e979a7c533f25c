#include "base/buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace mnemo {

namespace {

size_t page_size() {
  static const size_t kPage = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : AlignedBuffer::kAlignment;
  }();
  return kPage;
}

}  // namespace

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

AlignedBuffer::~AlignedBuffer() { reset(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes) {
  AlignedBuffer buf;
  if (bytes == 0) return buf;
  const size_t page = page_size();
  if (bytes > SIZE_MAX - page) {
    return Status::no_space("mmap of " + std::to_string(bytes) + " bytes: size overflows");
  }
  const size_t mapped = (bytes + page - 1) / page * page;
  // Anonymous private mappings are zero-filled and committed lazily, page by page.
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::no_space("mmap of " + std::to_string(bytes) +
                            " bytes failed: " + std::strerror(errno));
  }
  // Buffers of 2 MiB or more (K/V, recurrent states) are read whole by every decode step:
  // transparent huge pages spare those reads TLB misses (advice; a kernel without THP ignores
  // it, and the pages are still committed on first touch, 2 MiB at a time).
  if (mapped >= kHugePageBytes) (void)madvise(p, mapped, MADV_HUGEPAGE);
  buf.data_ = static_cast<uint8_t*>(p);
  buf.size_ = bytes;
  buf.mapped_ = mapped;
  return buf;
}

Result<AlignedBuffer> AlignedBuffer::copy() const {
  MNEMO_ASSIGN_OR_RETURN(AlignedBuffer out, allocate(size_));
  if (size_ > 0) std::memcpy(out.data_, data_, size_);
  return out;
}

void AlignedBuffer::reset() {
  if (data_ != nullptr) {
    const int rc = munmap(data_, mapped_);
    CHECK(rc == 0) << "munmap failed: " << std::strerror(errno);
  }
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
}

}  // namespace mnemo
