// Streaming I/O for mnemo state files (format: docs/formats/state.md, constants:
// include/mnemo/state_format.h).
//
//   StateSink / StateSource   where bytes go to / come from: a caller's buffer, a growing vector,
//                             a file, or nothing (CountingSink, for state_get_size)
//   StateWriter               frames sections (tag, flags, length, payload, XXH3-64 checksum)
//   StateReader               the inverse, with bounds and checksum checks; every error is a
//                             Status whose message names the section, the byte offset and the cause
//
// Memory use is constant: a writer keeps one XXH3 state; a reader keeps one XXH3 state and, for
// file sources, one read buffer sized by the largest single view asked for (a chunk of rows),
// never the whole state. Checksums: XXH3-64 (seed 0) from the xxHash library (Yann Collet,
// xxhash.com, "XXH3" in doc/xxhash_spec.md).
//
// None of these classes is thread-safe; each is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/quant.h"
#include "mnemo/state_format.h"
#include "mnemo/status.h"

struct XXH3_state_s;

namespace mnemo {

// ---------------------------------------------------------------------------------------------
// Sinks

/// Where a StateWriter's bytes go.
class StateSink {
 public:
  virtual ~StateSink() = default;
  /// Appends n bytes. Errors: kNoSpace (a full buffer), kIOError (the OS refused).
  virtual Status write(const void* data, size_t n) = 0;
  /// True when the sink only counts bytes: writers then skip checksums and row copies, so
  /// measuring a state's size costs O(metadata), not O(data).
  virtual bool counts_only() const { return false; }
};

/// Counts bytes and keeps none (state_get_size).
class CountingSink final : public StateSink {
 public:
  Status write(const void*, size_t n) override {
    bytes_ += n;
    return Status();
  }
  bool counts_only() const override { return true; }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
};

/// Writes into a caller's buffer; kNoSpace (naming both sizes) when it would overflow.
class SpanSink final : public StateSink {
 public:
  explicit SpanSink(std::span<uint8_t> out) : out_(out) {}
  Status write(const void* data, size_t n) override;
  /// Bytes written so far.
  size_t size() const { return pos_; }

 private:
  std::span<uint8_t> out_;
  size_t pos_ = 0;
};

/// Appends to a vector the caller owns (tests, small states).
class VectorSink final : public StateSink {
 public:
  explicit VectorSink(std::vector<uint8_t>* out) : out_(out) {}
  Status write(const void* data, size_t n) override;

 private:
  std::vector<uint8_t>* out_;
};

/// Writes a file atomically: bytes go to "<path>.tmp.<pid>", and commit() flushes, closes and
/// renames it over `path`. Destroying the sink without commit() removes the temporary file, so
/// a failed save never leaves a truncated state under the final name nor clobbers an old one.
/// Buffered (1 MiB).
class FileSink final : public StateSink {
 public:
  /// Errors: kIOError naming the path and the OS reason.
  static Result<std::unique_ptr<FileSink>> create(const std::string& path);
  ~FileSink() override;
  Status write(const void* data, size_t n) override;
  /// Flushes, closes and renames into place. Errors: kIOError.
  Status commit();

 private:
  FileSink(std::string path, std::string tmp, std::FILE* f) : path_(path), tmp_(tmp), f_(f) {}
  std::string path_;
  std::string tmp_;
  std::FILE* f_;
  std::vector<char> buf_;
};

// ---------------------------------------------------------------------------------------------
// Sources

/// Where a StateReader's bytes come from. Sources are seekable: restoring reads a state twice
/// (validate everything, then apply), see include/mnemo/state.h.
class StateSource {
 public:
  virtual ~StateSource() = default;
  /// Makes the next n bytes readable at *out (valid until the next call on this source) and
  /// advances. Errors: kCorruption "truncated" when fewer than n bytes remain; kIOError.
  virtual Status next(size_t n, const uint8_t** out) = 0;
  /// Current offset from the start.
  virtual uint64_t tell() const = 0;
  /// Moves to an offset <= size().
  virtual Status seek(uint64_t offset) = 0;
  /// Total bytes.
  virtual uint64_t size() const = 0;
  /// True when the bytes cannot change between two passes (a caller's buffer): the second pass
  /// of a restore then skips re-hashing. A file may be changed by another process meanwhile.
  virtual bool stable() const { return false; }
};

/// A caller's buffer (zero-copy). The buffer must outlive the source and stay unchanged.
class SpanSource final : public StateSource {
 public:
  explicit SpanSource(std::span<const uint8_t> in) : in_(in) {}
  Status next(size_t n, const uint8_t** out) override;
  uint64_t tell() const override { return pos_; }
  Status seek(uint64_t offset) override;
  uint64_t size() const override { return in_.size(); }
  bool stable() const override { return true; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

/// A file read with pread() into one buffer that grows to the largest single next() request.
class FileSource final : public StateSource {
 public:
  /// Errors: kNotFound for a missing file, kIOError otherwise (both name the path).
  static Result<std::unique_ptr<FileSource>> open(const std::string& path);
  ~FileSource() override;
  Status next(size_t n, const uint8_t** out) override;
  uint64_t tell() const override { return pos_; }
  Status seek(uint64_t offset) override;
  uint64_t size() const override { return size_; }

 private:
  FileSource(std::string path, int fd, uint64_t size) : path_(path), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
};

// ---------------------------------------------------------------------------------------------
// Writer and reader

/// Writes the file header and sections. Every section's length is declared up front
/// (begin_section) and end_section() CHECKs that exactly that many bytes were put: lengths are
/// computed, not guessed, so a mismatch is a bug in the caller.
class StateWriter {
 public:
  explicit StateWriter(StateSink* sink);
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  /// magic, state_format::kVersion, reserved 0.
  Status write_file_header();
  /// Starts a section of exactly `length` payload bytes.
  Status begin_section(uint32_t tag, uint64_t length);
  /// Payload bytes of the open section.
  Status put(const void* data, size_t n);
  Status put_u32(uint32_t v);
  Status put_i32(int32_t v) { return put_u32(static_cast<uint32_t>(v)); }
  Status put_u64(uint64_t v);
  /// Ends the open section: writes its checksum.
  Status end_section();
  /// A whole section whose payload is already assembled.
  Status write_section(uint32_t tag, std::span<const uint8_t> payload);

  /// See StateSink::counts_only(): callers may skip producing data bytes and call skip() instead.
  bool counts_only() const { return counts_only_; }
  /// Accounts for n payload bytes without producing them (counting sinks only; CHECKed).
  Status skip(size_t n);
  uint64_t bytes_written() const { return bytes_; }

 private:
  StateSink* sink_;
  bool counts_only_;
  XXH3_state_s* hash_;
  bool in_section_ = false;
  uint64_t remaining_ = 0;
  uint64_t bytes_ = 0;
};

/// Little-endian payload assembly for small sections (metadata).
class PayloadBuilder {
 public:
  void u32(uint32_t v);
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void u64(uint64_t v);
  void bytes(const void* p, size_t n);
  std::span<const uint8_t> data() const { return buf_; }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<uint8_t> buf_;
};

/// Reads what StateWriter writes. All reads of a section's payload are bounded by its declared
/// length; the declared length is bounded by what the source still holds, so no allocation a
/// reader makes can exceed the source's size.
class StateReader {
 public:
  struct Section {
    uint32_t tag = 0;
    uint32_t flags = 0;
    uint64_t length = 0;
    uint64_t offset = 0;  // offset of the section header in the source
  };

  explicit StateReader(StateSource* source);
  ~StateReader();
  StateReader(const StateReader&) = delete;
  StateReader& operator=(const StateReader&) = delete;

  /// Reads and checks the 16-byte header; returns the version. Errors: kCorruption "not a mnemo
  /// state" (bad magic / too short), kNotSupported for a version newer than this build reads
  /// (naming both), kCorruption for a version below kMinVersion or a non-zero reserved word.
  Result<uint32_t> read_file_header();

  /// Reads the next section header. Errors: kCorruption when the source ends or the declared
  /// length runs past the end of the source.
  Result<Section> begin_section();
  /// begin_section(), then requires `tag` (kCorruption naming expected and found tags).
  /// Unknown ancillary sections before it are skipped (their checksums are still verified).
  Result<Section> expect_section(uint32_t tag);

  /// Reads n payload bytes. Errors: kCorruption when the section has fewer left.
  Status get(void* out, size_t n);
  Status get_u32(uint32_t* v);
  Status get_i32(int32_t* v);
  Status get_u64(uint64_t* v);
  /// Zero-copy read of n payload bytes: *out is valid until the next call on this reader.
  Status view(size_t n, const uint8_t** out);
  /// Consumes n payload bytes without looking at them (still hashed when verifying).
  Status skip(uint64_t n);
  /// Payload bytes of the open section not read yet.
  uint64_t remaining() const { return remaining_; }

  /// Requires the payload to be fully read, then reads and verifies the checksum. Errors:
  /// kCorruption "N unread bytes" or "checksum mismatch (stored X, computed Y)".
  Status end_section();

  /// Whether checksums are computed and compared (default true). A second pass over a stable
  /// source may turn it off.
  void set_verify(bool verify) { verify_ = verify; }

  uint64_t offset() const { return source_->tell(); }
  Status seek(uint64_t offset);
  uint64_t source_size() const { return source_->size(); }

  /// An error about the open section: kCorruption "state: section KVLY at offset N: <what>".
  Status corrupt(const std::string& what) const;
  /// The same prefix with another code (a valid file that does not fit this memory, ...).
  Status error(StatusCode code, const std::string& what) const;

 private:
  Status raw(size_t n, const uint8_t** out);

  StateSource* source_;
  XXH3_state_s* hash_;
  bool verify_ = true;
  bool in_section_ = false;
  Section section_;
  uint64_t remaining_ = 0;
};

/// "HEAD", "KVLY", or "0x12345678" for a tag that is not printable ASCII.
std::string tag_name(uint32_t tag);

// ---------------------------------------------------------------------------------------------
// What a memory's state hooks are asked to do (Memory::state_write / state_read, memory.h).

struct StateWriteSpec {
  state_format::Scope scope = state_format::Scope::kWhole;
  SeqId seq = -1;  // kSequence: the sequence to save
  /// When set, attention K (V) rows are written converted to this K/V cache type, with the
  /// rotation a stream of the written types gets (kv_rotation_for over the cache's rotation
  /// size): the state then reads as if saved from a cache of those types. The memory itself is
  /// not changed. A type that is not a K/V cache type is kInvalidArgument. Recurrent parts
  /// ignore them (always f32). Used by the prompt cache to store entries in a cheaper type.
  std::optional<GgmlType> k_type;
  std::optional<GgmlType> v_type;
};

/// What the validation pass of a sequence-scope restore found: the positions the destination
/// sequence will hold once the restore is applied (as seq_pos_min / seq_pos_max will answer
/// then), so that a caller can check its own record of the sequence (a slot's token list)
/// before anything changes. set = false: no part reported (a memory without positions).
struct StateSeqSummary {
  bool set = false;
  Pos pos_min = -1;  // -1 when the state holds no cell
  Pos pos_max = -1;
};

struct StateReadSpec {
  state_format::Scope scope = state_format::Scope::kWhole;
  SeqId src_seq = -1;   // kSequence: the seq_id recorded in the state
  SeqId dst_seq = -1;   // kSequence: the sequence that receives the cells (replacing its own)
  bool dry_run = true;  // validate only; nothing changes
  /// Dry run, kSequence scope: filled by the first part that holds positions (a KV cache's
  /// cells; a recurrent state's range). The full-attention part comes first in every memory
  /// made of several parts, so its range is what is reported. May be null.
  StateSeqSummary* summary = nullptr;
};

}  // namespace mnemo
