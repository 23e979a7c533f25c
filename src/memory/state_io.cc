// Sinks, sources, and the section framing of state files (docs/formats/state.md).
#include "mnemo/state_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace mnemo {

namespace sf = state_format;

namespace {

constexpr size_t kFileBuffer = size_t{1} << 20;

// Fuzzing builds (src/memory/CMakeLists.txt) accept wrong checksums, so that mutated inputs reach
// the validation behind them instead of all stopping at the first checksum.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kEnforceChecksums = false;
#else
constexpr bool kEnforceChecksums = true;
#endif

void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

std::string tag_name(uint32_t tag) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = char((tag >> (8 * i)) & 0xFF);
    if (c < 0x21 || c > 0x7E) {
      char b[16];
      std::snprintf(b, sizeof b, "0x%08x", tag);
      return b;
    }
    s += c;
  }
  return s;
}

// --- sinks -------------------------------------------------------------------------------------

Status SpanSink::write(const void* data, size_t n) {
  if (n > out_.size() - pos_) {
    return Status::no_space("state: the destination buffer of " + std::to_string(out_.size()) +
                            " bytes is too small (writing " + std::to_string(n) +
                            " bytes at offset " + std::to_string(pos_) + ")");
  }
  if (n > 0) std::memcpy(out_.data() + pos_, data, n);
  pos_ += n;
  return Status();
}

Status VectorSink::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  out_->insert(out_->end(), p, p + n);
  return Status();
}

Result<std::unique_ptr<FileSink>> FileSink::create(const std::string& path) {
  if (path.empty()) return Status::invalid_argument("state: empty file name");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return Status::io_error("state: cannot create " + tmp + ": " + std::strerror(errno));
  }
  std::unique_ptr<FileSink> s(new FileSink(path, tmp, f));
  s->buf_.resize(kFileBuffer);
  std::setvbuf(f, s->buf_.data(), _IOFBF, s->buf_.size());
  return s;
}

FileSink::~FileSink() {
  if (f_ != nullptr) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

Status FileSink::write(const void* data, size_t n) {
  CHECK(f_ != nullptr) << "write after commit";
  if (n > 0 && std::fwrite(data, 1, n, f_) != n) {
    return Status::io_error("state: writing " + tmp_ + " failed: " + std::strerror(errno));
  }
  return Status();
}

Status FileSink::commit() {
  CHECK(f_ != nullptr) << "commit twice";
  const bool flushed = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!flushed || !closed) {
    std::remove(tmp_.c_str());
    return Status::io_error("state: writing " + tmp_ + " failed: " + std::strerror(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    return Status::io_error("state: cannot rename " + tmp_ + " to " + path_ + ": " + why);
  }
  return Status();
}

// --- sources -----------------------------------------------------------------------------------

namespace {

Status truncated(uint64_t pos, size_t n, uint64_t size) {
  return Status::corruption("state: truncated: " + std::to_string(n) + " bytes needed at offset " +
                            std::to_string(pos) + ", the state ends at " + std::to_string(size));
}

}  // namespace

Status SpanSource::next(size_t n, const uint8_t** out) {
  if (n > in_.size() - pos_) return truncated(pos_, n, in_.size());
  *out = in_.data() + pos_;
  pos_ += n;
  return Status();
}

Status SpanSource::seek(uint64_t offset) {
  CHECK_LE(offset, in_.size());
  pos_ = static_cast<size_t>(offset);
  return Status();
}

Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::not_found("state: no such file: " + path);
    return Status::io_error("state: cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::io_error("state: " + path + " is not a regular file");
  }
  return std::unique_ptr<FileSource>(new FileSource(path, fd, uint64_t(st.st_size)));
}

FileSource::~FileSource() { ::close(fd_); }

Status FileSource::next(size_t n, const uint8_t** out) {
  if (n > size_ - pos_) return truncated(pos_, n, size_);
  if (buf_.size() < n) buf_.resize(n);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, buf_.data() + done, n - done, off_t(pos_ + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::io_error("state: reading " + path_ + ": " + std::strerror(errno));
    if (r == 0) return truncated(pos_ + done, n - done, pos_ + done);  // shrank meanwhile
    done += size_t(r);
  }
  *out = buf_.data();
  pos_ += n;
  return Status();
}

Status FileSource::seek(uint64_t offset) {
  CHECK_LE(offset, size_);
  pos_ = offset;
  return Status();
}

// --- writer ------------------------------------------------------------------------------------

StateWriter::StateWriter(StateSink* sink)
    : sink_(sink), counts_only_(sink->counts_only()), hash_(XXH3_createState()) {
  CHECK(hash_ != nullptr);
}

StateWriter::~StateWriter() { XXH3_freeState(hash_); }

Status StateWriter::write_file_header() {
  CHECK(!in_section_ && bytes_ == 0);
  uint8_t h[sf::kFileHeaderBytes];
  std::memcpy(h, sf::kMagic.data(), sf::kMagic.size());
  store_u32(h + 8, sf::kVersion);
  store_u32(h + 12, 0);
  MNEMO_RETURN_IF_ERROR(sink_->write(h, sizeof h));
  bytes_ += sizeof h;
  return Status();
}

Status StateWriter::begin_section(uint32_t tag, uint64_t length) {
  CHECK(!in_section_) << "section " << tag_name(tag) << " begun inside another";
  uint8_t h[sf::kSectionHeaderBytes];
  store_u32(h, tag);
  store_u32(h + 4, 0);
  store_u64(h + 8, length);
  if (!counts_only_) {
    XXH3_64bits_reset(hash_);
    XXH3_64bits_update(hash_, h, sizeof h);
  }
  MNEMO_RETURN_IF_ERROR(sink_->write(h, sizeof h));
  bytes_ += sizeof h;
  in_section_ = true;
  remaining_ = length;
  return Status();
}

Status StateWriter::put(const void* data, size_t n) {
  CHECK(in_section_);
  CHECK_LE(n, remaining_);
  if (!counts_only_) XXH3_64bits_update(hash_, data, n);
  MNEMO_RETURN_IF_ERROR(sink_->write(data, n));
  remaining_ -= n;
  bytes_ += n;
  return Status();
}

Status StateWriter::skip(size_t n) {
  CHECK(counts_only_) << "skip() is for counting sinks";
  CHECK(in_section_);
  CHECK_LE(n, remaining_);
  MNEMO_RETURN_IF_ERROR(sink_->write(nullptr, n));
  remaining_ -= n;
  bytes_ += n;
  return Status();
}

Status StateWriter::put_u32(uint32_t v) {
  uint8_t b[4];
  store_u32(b, v);
  return put(b, 4);
}

Status StateWriter::put_u64(uint64_t v) {
  uint8_t b[8];
  store_u64(b, v);
  return put(b, 8);
}

Status StateWriter::end_section() {
  CHECK(in_section_);
  CHECK(remaining_ == 0) << remaining_ << " declared bytes were not written";
  uint8_t b[8];
  store_u64(b, counts_only_ ? 0 : XXH3_64bits_digest(hash_));
  MNEMO_RETURN_IF_ERROR(sink_->write(b, 8));
  bytes_ += 8;
  in_section_ = false;
  return Status();
}

Status StateWriter::write_section(uint32_t tag, std::span<const uint8_t> payload) {
  MNEMO_RETURN_IF_ERROR(begin_section(tag, payload.size()));
  MNEMO_RETURN_IF_ERROR(put(payload.data(), payload.size()));
  return end_section();
}

void PayloadBuilder::u32(uint32_t v) {
  uint8_t b[4];
  store_u32(b, v);
  bytes(b, 4);
}

void PayloadBuilder::u64(uint64_t v) {
  uint8_t b[8];
  store_u64(b, v);
  bytes(b, 8);
}

void PayloadBuilder::bytes(const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  buf_.insert(buf_.end(), c, c + n);
}

// --- reader ------------------------------------------------------------------------------------

StateReader::StateReader(StateSource* source) : source_(source), hash_(XXH3_createState()) {
  CHECK(hash_ != nullptr);
}

StateReader::~StateReader() { XXH3_freeState(hash_); }

Status StateReader::corrupt(const std::string& what) const {
  return error(StatusCode::kCorruption, what);
}

Status StateReader::error(StatusCode code, const std::string& what) const {
  if (!in_section_) return Status(code, "state: " + what);
  return Status(code, "state: section " + tag_name(section_.tag) + " at offset " +
                          std::to_string(section_.offset) + ": " + what);
}

Status StateReader::raw(size_t n, const uint8_t** out) { return source_->next(n, out); }

Result<uint32_t> StateReader::read_file_header() {
  CHECK(!in_section_);
  if (source_->size() - source_->tell() < sf::kFileHeaderBytes) {
    return Status::corruption("state: not a mnemo state (only " +
                              std::to_string(source_->size() - source_->tell()) +
                              " bytes; the header alone is 16)");
  }
  const uint8_t* h = nullptr;
  MNEMO_RETURN_IF_ERROR(raw(sf::kFileHeaderBytes, &h));
  if (std::memcmp(h, sf::kMagic.data(), sf::kMagic.size()) != 0) {
    return Status::corruption("state: not a mnemo state (bad magic bytes at offset 0)");
  }
  const uint32_t version = load_u32(h + 8);
  const uint32_t reserved = load_u32(h + 12);
  if (version > sf::kVersion) {
    return Status::not_supported("state: format version " + std::to_string(version) +
                                 " is newer than this build reads (versions " +
                                 std::to_string(sf::kMinVersion) + " to " +
                                 std::to_string(sf::kVersion) + "); upgrade mnemo to read it");
  }
  if (version < sf::kMinVersion) {
    return Status::corruption("state: format version " + std::to_string(version) +
                              " does not exist (the first version is " +
                              std::to_string(sf::kMinVersion) + ")");
  }
  if (reserved != 0) {
    return Status::corruption("state: reserved header word at offset 12 is " +
                              std::to_string(reserved) + ", must be 0");
  }
  return version;
}

Result<StateReader::Section> StateReader::begin_section() {
  CHECK(!in_section_) << "section begun inside another";
  Section s;
  s.offset = source_->tell();
  const uint64_t left = source_->size() - s.offset;
  if (left < sf::kSectionHeaderBytes + sf::kChecksumBytes) {
    return Status::corruption("state: truncated: a section was expected at offset " +
                              std::to_string(s.offset) + " but only " + std::to_string(left) +
                              " bytes remain");
  }
  const uint8_t* h = nullptr;
  MNEMO_RETURN_IF_ERROR(raw(sf::kSectionHeaderBytes, &h));
  s.tag = load_u32(h);
  s.flags = load_u32(h + 4);
  s.length = load_u64(h + 8);
  if (verify_) {
    XXH3_64bits_reset(hash_);
    XXH3_64bits_update(hash_, h, sf::kSectionHeaderBytes);
  }
  section_ = s;
  in_section_ = true;
  remaining_ = s.length;
  const uint64_t avail = left - sf::kSectionHeaderBytes - sf::kChecksumBytes;
  if (s.length > avail) {
    return corrupt("declared length " + std::to_string(s.length) + " runs past the end (" +
                   std::to_string(avail) + " payload bytes remain; truncated?)");
  }
  if (s.flags != 0) return corrupt("flags are " + std::to_string(s.flags) + ", must be 0");
  return s;
}

Result<StateReader::Section> StateReader::expect_section(uint32_t tag) {
  for (;;) {
    Result<Section> s = begin_section();
    if (!s.ok()) {
      in_section_ = false;
      return s.status();
    }
    if (s->tag == tag) return s;
    if (sf::is_ancillary(s->tag)) {
      Status st = skip(s->length);
      if (st.ok()) st = end_section();
      if (!st.ok()) {
        in_section_ = false;
        return st;
      }
      continue;
    }
    Status st = corrupt("expected section " + tag_name(tag) + ", found " + tag_name(s->tag));
    in_section_ = false;
    return st;
  }
}

Status StateReader::view(size_t n, const uint8_t** out) {
  CHECK(in_section_);
  if (n > remaining_) {
    return corrupt("needs " + std::to_string(n) + " more payload bytes, " +
                   std::to_string(remaining_) + " remain");
  }
  MNEMO_RETURN_IF_ERROR(raw(n, out));
  if (verify_) XXH3_64bits_update(hash_, *out, n);
  remaining_ -= n;
  return Status();
}

Status StateReader::get(void* out, size_t n) {
  const uint8_t* p = nullptr;
  MNEMO_RETURN_IF_ERROR(view(n, &p));
  if (n > 0) std::memcpy(out, p, n);
  return Status();
}

Status StateReader::get_u32(uint32_t* v) {
  const uint8_t* p = nullptr;
  MNEMO_RETURN_IF_ERROR(view(4, &p));
  *v = load_u32(p);
  return Status();
}

Status StateReader::get_i32(int32_t* v) {
  uint32_t u = 0;
  MNEMO_RETURN_IF_ERROR(get_u32(&u));
  *v = static_cast<int32_t>(u);
  return Status();
}

Status StateReader::get_u64(uint64_t* v) {
  const uint8_t* p = nullptr;
  MNEMO_RETURN_IF_ERROR(view(8, &p));
  *v = load_u64(p);
  return Status();
}

Status StateReader::skip(uint64_t n) {
  CHECK(in_section_);
  if (n > remaining_) {
    return corrupt("needs " + std::to_string(n) + " more payload bytes, " +
                   std::to_string(remaining_) + " remain");
  }
  if (!verify_) {
    MNEMO_RETURN_IF_ERROR(source_->seek(source_->tell() + n));
    remaining_ -= n;
    return Status();
  }
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, kFileBuffer));
    const uint8_t* p = nullptr;
    MNEMO_RETURN_IF_ERROR(view(chunk, &p));
    n -= chunk;
  }
  return Status();
}

Status StateReader::end_section() {
  CHECK(in_section_);
  if (remaining_ != 0) {
    return corrupt(std::to_string(remaining_) + " payload bytes were not understood");
  }
  const uint8_t* p = nullptr;
  Status st = raw(sf::kChecksumBytes, &p);
  if (!st.ok()) return corrupt(st.message());
  const uint64_t stored = load_u64(p);
  if (verify_) {
    const uint64_t computed = XXH3_64bits_digest(hash_);
    if (stored != computed && kEnforceChecksums) {
      return corrupt("checksum mismatch (stored " + hex64(stored) + ", computed " +
                     hex64(computed) + "): the bytes were damaged");
    }
  }
  in_section_ = false;
  return Status();
}

Status StateReader::seek(uint64_t offset) {
  in_section_ = false;
  remaining_ = 0;
  return source_->seek(offset);
}

}  // namespace mnemo
