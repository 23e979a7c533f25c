// The repack cache file: key, writer, checked reader. Format: src/model/repack_cache.h.

#include "model/repack_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

namespace mnemo {
namespace {

constexpr char kMagic[8] = {'M', 'N', 'R', 'P', 'A', 'C', 'K', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kEntryBytes = 8 + 8 + 8 + 4 + 4 + 8;

struct Put {
  std::string out;
  void u32(uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
  void u64(uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
};

struct Get {
  const uint8_t* p;
  size_t n;
  size_t at = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (at + sizeof(T) > n) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
};

std::string path_of(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / (key + ".mnrp")).string();
}

Status io_error(const std::string& what) {
  return Status::io_error("repack cache: " + what + ": " + std::strerror(errno));
}

}  // namespace

std::string repack_cache_key(const gguf::File& file, int64_t mtime_ns) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  // The header bytes: the File maps the whole file; the first tensor's data pointer minus its
  // offset is the mapping's base plus data_offset.
  const std::vector<gguf::TensorInfo>& ts = file.tensors();
  if (!ts.empty()) {
    const uint8_t* data0 = static_cast<const uint8_t*>(ts.front().data) - ts.front().offset;
    const uint8_t* base = data0 - file.data_offset();
    XXH3_128bits_update(st, base, file.data_offset());
  }
  const uint64_t size = file.file_size();
  const int version = kernels::kPackedLayoutVersion;
  const std::string target = kernels::simd_target();
  XXH3_128bits_update(st, &size, sizeof size);
  XXH3_128bits_update(st, &mtime_ns, sizeof mtime_ns);
  XXH3_128bits_update(st, &version, sizeof version);
  XXH3_128bits_update(st, target.data(), target.size());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

RepackCacheFile::~RepackCacheFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

Result<std::unique_ptr<RepackCacheFile>> RepackCacheFile::open(const std::string& dir,
                                                               const std::string& key,
                                                               ThreadPool* pool) {
  const std::string path = path_of(dir, key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::not_found("repack cache: no entry " + key);
    return io_error("opening entry " + key);
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    const Status st = io_error("reading entry " + key);
    ::close(fd);
    return st;
  }
  std::unique_ptr<RepackCacheFile> f(new RepackCacheFile());
  f->size_ = static_cast<size_t>(sb.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return Status::corruption("repack cache: entry " + key + " is empty");
  }
  f->map_ = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return io_error("mapping entry " + key);
  }
  const auto* base = static_cast<const uint8_t*>(f->map_);
  const auto bad = [&](const std::string& why) {
    return Status::corruption("repack cache: entry " + key + " " + why);
  };
  Get g{base, f->size_};
  char magic[8];
  for (char& c : magic) c = g.get<char>();
  const uint32_t format = g.get<uint32_t>();
  const uint32_t layout_version = g.get<uint32_t>();
  const uint32_t key_len = g.get<uint32_t>();
  if (!g.ok || std::memcmp(magic, kMagic, 8) != 0) return bad("is not a repack cache file");
  if (format != kFormatVersion || layout_version != uint32_t(kernels::kPackedLayoutVersion)) {
    return bad("has another format or layout version");
  }
  if (key_len != key.size() || g.at + key_len > g.n ||
      std::memcmp(base + g.at, key.data(), key_len) != 0) {
    return bad("was written for another key");
  }
  g.at += key_len;
  const uint64_t n = g.get<uint64_t>();
  if (!g.ok || n > (g.n - g.at) / kEntryBytes) return bad("is truncated");
  struct Entry {
    uint64_t offset, bytes, sum;
  };
  std::vector<Entry> entries(n);
  f->images_.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    Entry& e = entries[i];
    kernels::PackedImage& img = f->images_[i];
    e.offset = g.get<uint64_t>();
    e.bytes = g.get<uint64_t>();
    img.group_bytes = g.get<int64_t>();
    img.format = g.get<int32_t>();
    img.layout = g.get<int32_t>();
    e.sum = g.get<uint64_t>();
    if (e.bytes > 0 && (e.offset % 64 != 0 || e.offset > f->size_ || e.bytes > f->size_ - e.offset)) {
      return bad("has an entry outside the file");
    }
    img.bytes = e.bytes;
    img.data = e.bytes > 0 ? base + e.offset : nullptr;
  }
  const size_t header_end = g.at;
  const uint64_t header_sum = g.get<uint64_t>();
  if (!g.ok || header_sum != XXH3_64bits(base, header_end)) return bad("has a damaged header");
  std::atomic<bool> damaged{false};
  auto check = [&](int64_t i, int) {
    const Entry& e = entries[i];
    if (e.bytes > 0 && XXH3_64bits(base + e.offset, e.bytes) != e.sum) damaged = true;
  };
  if (pool != nullptr) {
    pool->parallel_for(int64_t(n), check);
  } else {
    for (uint64_t i = 0; i < n; ++i) check(int64_t(i), 0);
  }
  if (damaged) return bad("has damaged weights");
  return f;
}

Status write_repack_cache(const std::string& dir, const std::string& key,
                          std::span<const kernels::PackedImage> images) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error("repack cache: creating the directory: " + ec.message());
  Put h;
  h.out.append(kMagic, 8);
  h.u32(kFormatVersion);
  h.u32(uint32_t(kernels::kPackedLayoutVersion));
  h.u32(uint32_t(key.size()));
  h.out += key;
  h.u64(images.size());
  const size_t header_bytes = h.out.size() + images.size() * kEntryBytes + 8;
  uint64_t offset = (header_bytes + 63) / 64 * 64;
  for (const kernels::PackedImage& img : images) {
    const uint64_t bytes = img.data != nullptr ? img.bytes : 0;
    h.u64(bytes > 0 ? offset : 0);
    h.u64(bytes);
    h.u64(uint64_t(img.group_bytes));
    h.u32(uint32_t(img.format));
    h.u32(uint32_t(img.layout));
    h.u64(bytes > 0 ? XXH3_64bits(img.data, bytes) : 0);
    offset += (bytes + 63) / 64 * 64;
  }
  h.u64(XXH3_64bits(h.out.data(), h.out.size()));
  const std::string path = path_of(dir, key);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("creating an entry");
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= size_t(w);
    }
    return true;
  };
  static const char zeros[64] = {};
  bool ok = write_all(h.out.data(), h.out.size());
  size_t at = h.out.size();
  for (const kernels::PackedImage& img : images) {
    if (!ok || img.data == nullptr || img.bytes == 0) continue;
    const size_t pad = (64 - at % 64) % 64;
    ok = write_all(zeros, pad) && write_all(img.data, img.bytes);
    at += pad + img.bytes;
  }
  ok = ok && ::fsync(fd) == 0;
  const Status failed = ok ? Status() : io_error("writing an entry");
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status st = ok ? io_error("renaming an entry into place") : failed;
    ::unlink(tmp.c_str());
    return st;
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

}  // namespace mnemo
