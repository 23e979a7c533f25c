// GGUF reader (mmap'd, fully bounds-checked) and writer.
//
// Source: the GGUF specification, ggml-org/ggml docs/gguf.md (versions 2 and 3). Section
// references below ("GGUF spec §...") name its headings. All integers little-endian.
//
// File layout (GGUF spec "File Structure"):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type,
//   value) | n_tensors x tensor info (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type,
//   u64 offset) | padding to general.alignment | tensor data (each tensor at data_offset + offset,
//   offset a multiple of the alignment).
//
// Reader guarantees: every count, length and offset is checked against the file size before it
// is used; a malformed file yields Status::corruption() (Status::not_supported() for an unknown
// version or tensor type id) whose message names the problem and the byte offset. No allocation
// is sized from an unchecked count: each count is first bounded by the bytes left in the file
// divided by the smallest encoding of one item, so memory use is at most a small constant factor
// (one Value, ~48 bytes, per encoded byte in the worst case) of the file size. Array nesting is
// bounded by kMaxArrayDepth. Never a crash on any input (fuzzed: tests/fuzz/fuzz_gguf.cc).
//
// Beyond the spec's letter, the reader also rejects (as llama.cpp / gguf-py do): duplicate keys,
// duplicate tensor names, general.alignment that is not a nonzero power-of-two uint32, a bool byte
// other than 0 or 1, more than kMaxDims dimensions, a dimension < 1, an element count above
// INT64_MAX, a row length that is not a multiple of the type's block size, and a tensor offset
// that is not a multiple of the alignment or whose data ends past the end of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "mnemo/quant.h"
#include "mnemo/status.h"

namespace mnemo::gguf {

/// "GGUF" as a little-endian u32 (GGUF spec "File Structure": magic).
inline constexpr uint32_t kMagic = 0x46554747;
/// Versions the reader accepts (GGUF spec: v2 moved counts and lengths to u64; v3 added
/// big-endian files, which mnemo does not read). The writer writes kVersion.
inline constexpr uint32_t kMinVersion = 2;
inline constexpr uint32_t kVersion = 3;
/// Alignment of the data section and of every tensor offset when general.alignment is absent
/// (GGUF spec "Standardized key-value pairs": general.alignment).
inline constexpr uint64_t kDefaultAlignment = 32;
/// Most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
inline constexpr uint32_t kMaxDims = 4;
/// Deepest array nesting the reader accepts (an array of arrays has depth 2). Bounds recursion.
inline constexpr int kMaxArrayDepth = 16;

/// Metadata value type ids (GGUF spec "gguf_metadata_value_type").
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

/// Lower-case name of a value type, as gguf-py spells it ("uint32", "float32", "string",
/// "array", ...); "unknown" for an id outside the enum.
std::string_view value_type_name(ValueType t);

struct Value;
/// An array value: element type plus elements (arrays may nest: GGUF spec allows arrays of
/// arrays).
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
};

/// One metadata value (GGUF spec "gguf_metadata_value_t"). Integers keep their declared GGUF
/// type in `type`; the payload is uint64_t for unsigned integer types, int64_t for signed ones,
/// double for FLOAT32 / FLOAT64 (a float32 widened exactly), bool, std::string (raw bytes, UTF-8
/// not checked) or Array. Build values with the factories below; the Writer rejects a Value
/// whose payload does not match its type.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  static Value u8(uint8_t x) { return {ValueType::UINT8, uint64_t{x}}; }
  static Value i8(int8_t x) { return {ValueType::INT8, int64_t{x}}; }
  static Value u16(uint16_t x) { return {ValueType::UINT16, uint64_t{x}}; }
  static Value i16(int16_t x) { return {ValueType::INT16, int64_t{x}}; }
  static Value u32(uint32_t x) { return {ValueType::UINT32, uint64_t{x}}; }
  static Value i32(int32_t x) { return {ValueType::INT32, int64_t{x}}; }
  static Value u64(uint64_t x) { return {ValueType::UINT64, x}; }
  static Value i64(int64_t x) { return {ValueType::INT64, x}; }
  static Value f32(float x) { return {ValueType::FLOAT32, double{x}}; }
  static Value f64(double x) { return {ValueType::FLOAT64, x}; }
  static Value boolean(bool x) { return {ValueType::BOOL, x}; }
  static Value str(std::string x) { return {ValueType::STRING, std::move(x)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem, std::move(items)}};
  }

  bool is_integer() const;  // any of the 8 integer types
  bool is_float() const;    // FLOAT32 or FLOAT64
  /// The value as a signed / unsigned integer if it is an integer that fits (nullopt for a
  /// negative as_uint(), a uint64 above INT64_MAX as_int(), or a non-integer).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  /// The value as double if it is an integer or a float (a uint64/int64 may round).
  std::optional<double> as_double() const;
  /// Views into the value (valid while it lives); null / nullopt when the type differs.
  const std::string* as_string() const;
  const Array* as_array() const;
  std::optional<bool> as_bool() const;
};

/// Deep equality: same types (declared GGUF type, element type) and same values. Floats compare
/// with ==, so a NaN is unequal to itself.
bool operator==(const Value& a, const Value& b);
bool operator==(const Array& a, const Array& b);

/// One tensor's description (GGUF spec "gguf_tensor_info_t").
struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] (fastest-varying, row length) first, as in GGUF
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t n_bytes = 0;           // row_size(type, dims[0]) * product(dims[1:])
  const uint8_t* data = nullptr;  // into the mapping (reader); null for writer-side infos

  /// Product of dims (1 for a 0-dimensional scalar).
  int64_t n_elements() const;
};

/// A parsed, memory-mapped GGUF file. Move-only; tensor data pointers (and pointers returned
/// by find / get_array / find_tensor) stay valid while it lives, across moves. Immutable after
/// parsing, so const methods may be called from several threads at once.
class File {
 public:
  /// Opens and validates `path` (mmap). NotFound for a missing file, IOError if it cannot be
  /// mapped, Corruption / NotSupported for a malformed file (message has the byte offset).
  static Result<File> open(const std::string& path);
  /// Parses a buffer the caller keeps alive as long as the File (fuzzing, tests). No copy.
  static Result<File> from_memory(std::span<const uint8_t> bytes);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  /// GGUF version of the file: 2 or 3.
  uint32_t version() const { return version_; }
  /// general.alignment, or kDefaultAlignment (32) when absent; bytes, a power of two.
  uint64_t alignment() const { return alignment_; }
  /// Absolute byte offset of the data section: the end of the tensor infos rounded up to the
  /// alignment (may equal file_size() or exceed it for a file without tensors).
  uint64_t data_offset() const { return data_offset_; }
  /// Bytes in the file / buffer.
  uint64_t file_size() const { return bytes_.size(); }

  /// All metadata in file order (keys are unique: a duplicate key is a Corruption error).
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  /// The value of `key`, or null when absent.
  const Value* find(std::string_view key) const;

  /// `general.architecture`, or "" when absent.
  std::string architecture() const;

  /// Typed accessors. Missing key -> NotFound naming it; wrong type -> InvalidArgument naming
  /// the key, the expected and the actual type. get_uint / get_int accept any integer type whose
  /// value fits (InvalidArgument naming the value otherwise); get_float accepts FLOAT32 / FLOAT64
  /// and integers; get_bool, get_string and get_array only their own type.
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<const Array*> get_array(std::string_view key) const;

  /// Architecture-prefixed accessors: get_arch_uint("context_length") reads
  /// "{general.architecture}.context_length" (GGUF spec "LLM": "[llm].context_length"). NotFound
  /// naming general.architecture when the file has none, else as get_uint / get_float.
  Result<uint64_t> get_arch_uint(std::string_view suffix) const;
  Result<double> get_arch_float(std::string_view suffix) const;
  /// "{architecture()}.{suffix}" (".{suffix}" when there is no architecture).
  std::string arch_key(std::string_view suffix) const;

  /// Tensor infos in file order; names are unique.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// The tensor called `name`, or null.
  const TensorInfo* find_tensor(std::string_view name) const;

  /// Tells the OS that the bytes [data, data + n) of the mapping will not be read for a while
  /// (the whole pages inside the range are dropped from this process's memory; a later read
  /// faults them in again from the file, so the contents never change). For tensors whose
  /// data was copied elsewhere (repacked weights). No-op for a File made from_memory or a range
  /// outside the mapping.
  void release_pages(const void* data, size_t n) const;

 private:
  File() = default;
  Status parse();

  std::span<const uint8_t> bytes_;
  void* map_ = nullptr;  // mmap base when opened from a path
  size_t map_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

/// Builds a GGUF v3 file in memory order and writes it. Used for tiny synthetic models in tests
/// and tools: it holds a copy of every tensor's bytes until serialize() (not for large models).
/// Not thread-safe. Output is read back identically by the `gguf` PyPI package
/// (tests/python/test_gguf.py) and by File.
class Writer {
 public:
  /// alignment: general.alignment (a power of two that fits a uint32 — CHECKed, it is a
  /// programmer's choice); written as the first metadata key, as uint32, only if not 32.
  /// Every tensor starts at a multiple of it and is zero-padded to one (as gguf-py and ggml do),
  /// the last one included.
  explicit Writer(uint64_t alignment = kDefaultAlignment);

  /// Adds a metadata key (InvalidArgument on a duplicate key, an empty key, or a malformed value:
  /// an integer out of its declared type's range, a payload that does not match `type`, an array
  /// item whose type differs from elem_type, nesting deeper than kMaxArrayDepth). Adding
  /// general.alignment is InvalidArgument unless it is the uint32 given to the constructor.
  Status add(std::string key, Value value);
  /// Adds a tensor; `data` must hold exactly row_size(type, dims[0]) * prod(dims[1:]) bytes
  /// (InvalidArgument otherwise, or for a duplicate name / bad shape). The bytes are copied.
  /// Bad shape: more than kMaxDims dims, a dim < 1, dims[0] not a multiple of the block size, an
  /// element count above INT64_MAX. Names must be 1..63 bytes (llama.cpp's GGML_MAX_NAME).
  Status add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                    std::span<const uint8_t> data);
  /// Convenience: an F32 tensor from floats.
  Status add_tensor_f32(std::string name, std::vector<int64_t> dims, std::span<const float> data);

  /// The whole file as bytes: metadata and tensors in the order added, tensor offsets assigned
  /// consecutively, each rounded up to the alignment.
  std::vector<uint8_t> serialize() const;
  /// Writes the file (IOError naming the path on failure).
  Status write(const std::string& path) const;

 private:
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<uint8_t> data;
  };
  std::vector<PendingTensor> tensors_;
};

}  // namespace mnemo::gguf
