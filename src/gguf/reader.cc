// GGUF reader: maps a file (or takes a caller's buffer) and parses the header, metadata and tensor
// table with every size and offset checked against the bytes that are there (GGUF spec
// "File Structure"). Tensor data is not copied: TensorInfo::data points into the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "gguf/format.h"
#include "mnemo/gguf.h"

namespace mnemo::gguf {
namespace {

using internal::checked_add;

std::string at(uint64_t offset) { return " at byte offset " + std::to_string(offset); }

std::string quoted(std::string_view s) {
  // Names come from the file: keep messages short and printable.
  constexpr size_t kMaxShown = 64;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

// A read position over the file bytes. Every read checks the bytes left first; a short read is
// a Corruption naming what was being read and where.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return Status::corruption("truncated file: " + std::string(what) + " needs " +
                                std::to_string(n) + " bytes but " + std::to_string(remaining()) +
                                " remain" + at(pos_));
    }
    return Status();
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    MNEMO_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));  // little-endian host (x86-64, arm64)
    pos_ += sizeof(T);
    return Status();
  }

  // A GGUF string: u64 length, then that many bytes (GGUF spec "gguf_string_t").
  Status read_string(std::string* out, std::string_view what) {
    const uint64_t start = pos_;
    uint64_t len = 0;
    MNEMO_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return Status::corruption(std::string(what) + " has length " + std::to_string(len) +
                                " but only " + std::to_string(remaining()) +
                                " bytes remain in the file" + at(start));
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return Status();
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

Status read_value(Cursor& c, ValueType type, int depth, Value* out);

// Reads a u32 value type tag and checks it is one of the 13 known ids.
Status read_value_type(Cursor& c, std::string_view what, ValueType* out) {
  const uint64_t start = c.pos();
  uint32_t id = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&id, what));
  if (!internal::is_known_value_type(id)) {
    return Status::corruption("unknown " + std::string(what) + " " + std::to_string(id) +
                              at(start));
  }
  *out = static_cast<ValueType>(id);
  return Status();
}

Status read_array(Cursor& c, int depth, Value* out) {
  const uint64_t start = c.pos();
  if (depth >= kMaxArrayDepth) {
    return Status::corruption("array nesting deeper than " + std::to_string(kMaxArrayDepth) +
                              at(start));
  }
  Array arr;
  MNEMO_RETURN_IF_ERROR(read_value_type(c, "array element type", &arr.elem_type));
  const uint64_t count_pos = c.pos();
  uint64_t count = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&count, "array length"));
  // Bound the count by the bytes left before reserving anything.
  const uint64_t min_size = internal::min_encoded_size(arr.elem_type);
  if (count > c.remaining() / min_size) {
    return Status::corruption("array of " + std::to_string(count) + " " +
                              std::string(value_type_name(arr.elem_type)) +
                              " elements cannot fit in the " + std::to_string(c.remaining()) +
                              " bytes that remain" + at(count_pos));
  }
  arr.items.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    arr.items.emplace_back();
    MNEMO_RETURN_IF_ERROR(read_value(c, arr.elem_type, depth + 1, &arr.items.back()));
  }
  out->type = ValueType::ARRAY;
  out->v = std::move(arr);
  return Status();
}

// Reads one scalar of wire type T (errors name `what`) into out->v, widened to Stored: uint64_t
// for the unsigned integers, int64_t for the signed ones, double for the floats.
template <class T, class Stored>
Status read_scalar(Cursor& c, const char* what, Value* out) {
  T x = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&x, what));
  out->v = Stored{x};
  return Status();
}

// Reads one value of a known type (its tag already consumed). depth = arrays enclosing it.
Status read_value(Cursor& c, ValueType type, int depth, Value* out) {
  const uint64_t start = c.pos();
  out->type = type;
  switch (type) {
    case ValueType::UINT8:
      return read_scalar<uint8_t, uint64_t>(c, "uint8 value", out);
    case ValueType::INT8:
      return read_scalar<int8_t, int64_t>(c, "int8 value", out);
    case ValueType::UINT16:
      return read_scalar<uint16_t, uint64_t>(c, "uint16 value", out);
    case ValueType::INT16:
      return read_scalar<int16_t, int64_t>(c, "int16 value", out);
    case ValueType::UINT32:
      return read_scalar<uint32_t, uint64_t>(c, "uint32 value", out);
    case ValueType::INT32:
      return read_scalar<int32_t, int64_t>(c, "int32 value", out);
    case ValueType::UINT64:
      return read_scalar<uint64_t, uint64_t>(c, "uint64 value", out);
    case ValueType::INT64:
      return read_scalar<int64_t, int64_t>(c, "int64 value", out);
    case ValueType::FLOAT32:
      return read_scalar<float, double>(c, "float32 value", out);
    case ValueType::FLOAT64:
      return read_scalar<double, double>(c, "float64 value", out);
    case ValueType::BOOL: {
      uint8_t x = 0;
      MNEMO_RETURN_IF_ERROR(c.read(&x, "bool value"));
      // GGUF spec: "0 is false and 1 is true. Anything else is invalid".
      if (x > 1) {
        return Status::corruption("bool value " + std::to_string(x) + " is neither 0 nor 1" +
                                  at(start));
      }
      out->v = x == 1;
      return Status();
    }
    case ValueType::STRING: {
      std::string s;
      MNEMO_RETURN_IF_ERROR(c.read_string(&s, "string value"));
      out->v = std::move(s);
      return Status();
    }
    case ValueType::ARRAY:
      return read_array(c, depth, out);
  }
  return Status::internal("unhandled value type" + at(start));
}

}  // namespace

File::File(File&& o) noexcept { *this = std::move(o); }

File& File::operator=(File&& o) noexcept {
  if (this == &o) return *this;
  if (map_ != nullptr) munmap(map_, map_size_);
  bytes_ = o.bytes_;
  map_ = std::exchange(o.map_, nullptr);
  map_size_ = std::exchange(o.map_size_, 0);
  o.bytes_ = {};
  version_ = o.version_;
  alignment_ = o.alignment_;
  data_offset_ = o.data_offset_;
  kv_ = std::move(o.kv_);
  kv_index_ = std::move(o.kv_index_);
  tensors_ = std::move(o.tensors_);  // data pointers point into the mapping, which did not move
  tensor_index_ = std::move(o.tensor_index_);
  return *this;
}

File::~File() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

Result<File> File::from_memory(std::span<const uint8_t> bytes) {
  File f;
  f.bytes_ = bytes;
  MNEMO_RETURN_IF_ERROR(f.parse());
  return f;
}

Result<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = "cannot open '" + path + "': " + std::strerror(err);
    if (err == ENOENT) return Status::not_found(msg);
    return Status::io_error(msg);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::io_error("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::io_error("'" + path + "' is not a regular file");
  }
  File f;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {  // mmap of 0 bytes fails; an empty file is reported as truncated by parse()
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::io_error("cannot mmap '" + path + "': " + std::strerror(err));
    }
    f.map_ = p;
    f.map_size_ = size;
    f.bytes_ = std::span<const uint8_t>(static_cast<const uint8_t*>(p), size);
  }
  ::close(fd);  // the mapping keeps the file alive
  Status st_parse = f.parse();
  if (!st_parse.ok()) return st_parse.with_context(path);
  return f;
}

void File::release_pages(const void* data, size_t n) const {
  if (map_ == nullptr || n == 0) return;
  const auto base = reinterpret_cast<uintptr_t>(map_);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (begin < base || begin + n > base + map_size_ || begin + n < begin) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;  // whole pages inside the range
  const uintptr_t last = (begin + n) / page * page;
  if (last <= first) return;
  // Advice only: a failure leaves the pages where they are.
  (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

namespace {

// The rest of one tensor info after its name (GGUF spec "gguf_tensor_info_t"): dimensions,
// type and data offset, checked (shape, type, alignment); errors name the tensor and the offset.
Status read_tensor_info(Cursor& c, uint64_t alignment, TensorInfo* out) {
  TensorInfo& t = *out;
  const std::string who = "tensor " + quoted(t.name);
  const uint64_t dims_pos = c.pos();
  uint32_t n_dims = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&n_dims, "tensor dimension count"));
  if (n_dims > kMaxDims) {
    return Status::corruption(who + " has " + std::to_string(n_dims) +
                              " dimensions, more than the maximum " + std::to_string(kMaxDims) +
                              at(dims_pos));
  }
  const uint64_t shape_pos = c.pos();
  t.dims.resize(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    MNEMO_RETURN_IF_ERROR(c.read(&ne, "tensor dimension"));
    // Stored as u64; ggml holds them as int64, so a value above INT64_MAX is negative there.
    t.dims[d] = static_cast<int64_t>(ne);
  }
  const uint64_t type_pos = c.pos();
  uint32_t type_id = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&type_id, "tensor type"));
  const std::optional<TypeTraits> tt = type_traits(type_id);
  if (!tt) {
    return Status::not_supported(who + " has unknown ggml type id " + std::to_string(type_id) +
                                 at(type_pos));
  }
  t.type = tt->type;
  const uint64_t offset_pos = c.pos();
  MNEMO_RETURN_IF_ERROR(c.read(&t.offset, "tensor data offset"));
  if (auto err = internal::tensor_shape_error(t.dims, t.type, &t.n_bytes)) {
    return Status::corruption(who + ": " + *err + at(shape_pos));
  }
  if (t.offset % alignment != 0) {
    return Status::corruption(who + " data offset " + std::to_string(t.offset) +
                              " is not a multiple of the alignment " + std::to_string(alignment) +
                              at(offset_pos));
  }
  return Status();
}

}  // namespace

Status File::parse() {
  Cursor c(bytes_);

  // Header (GGUF spec "gguf_header_t").
  uint32_t magic = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kMagic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    return Status::corruption(std::string("bad magic ") + hex + " (expected \"GGUF\")" + at(0));
  }
  MNEMO_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ < kMinVersion || version_ > kVersion) {
    std::string why = "GGUF version " + std::to_string(version_) + " is not supported (only " +
                      std::to_string(kMinVersion) + " and " + std::to_string(kVersion) + ")";
    // A big-endian v2/v3 file shows its version byte-swapped.
    if ((version_ & 0xffff) == 0 && __builtin_bswap32(version_) <= kVersion) {
      why += "; the file looks big-endian, which mnemo does not read";
    }
    return Status::not_supported(why + at(4));
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  MNEMO_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  MNEMO_RETURN_IF_ERROR(c.read(&n_kv, "metadata key/value count"));
  // Counts are bounded by the bytes left over the smallest encoding of one item, so nothing
  // below allocates in proportion to an absurd count.
  if (n_kv > c.remaining() / internal::kMinKvSize) {
    return Status::corruption("metadata key/value count " + std::to_string(n_kv) +
                              " cannot fit in the " + std::to_string(c.remaining()) +
                              " bytes that remain" + at(16));
  }
  if (n_tensors > c.remaining() / internal::kMinTensorInfoSize) {
    return Status::corruption("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                              std::to_string(c.remaining()) + " bytes that remain" + at(8));
  }

  // Metadata (GGUF spec "gguf_metadata_kv_t").
  kv_.reserve(n_kv);
  std::vector<uint64_t> kv_offsets;
  kv_offsets.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t start = c.pos();
    std::string key;
    MNEMO_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    auto [it, inserted] = kv_index_.emplace(key, kv_.size());
    if (!inserted) {
      return Status::corruption("duplicate metadata key " + quoted(key) + at(start) +
                                " (first at byte offset " + std::to_string(kv_offsets[it->second]) +
                                ")");
    }
    ValueType type{};
    MNEMO_RETURN_IF_ERROR(read_value_type(c, "value type of key " + quoted(key), &type));
    Value value;
    Status st = read_value(c, type, /*depth=*/0, &value);
    if (!st.ok()) return st.with_context("metadata key " + quoted(key));
    kv_.emplace_back(std::move(key), std::move(value));
    kv_offsets.push_back(start);
  }

  // general.alignment (GGUF spec "Standardized key-value pairs": uint32, a power of two).
  alignment_ = kDefaultAlignment;
  if (auto it = kv_index_.find("general.alignment"); it != kv_index_.end()) {
    const Value& a = kv_[it->second].second;
    const uint64_t off = kv_offsets[it->second];
    if (a.type != ValueType::UINT32) {
      return Status::corruption("general.alignment has type " +
                                std::string(value_type_name(a.type)) + ", expected uint32" +
                                at(off));
    }
    const uint64_t align = *a.as_uint();
    if (!internal::is_power_of_two(align)) {
      return Status::corruption("general.alignment " + std::to_string(align) +
                                " is not a nonzero power of two" + at(off));
    }
    alignment_ = align;
  }

  // Tensor infos (GGUF spec "gguf_tensor_info_t").
  tensors_.reserve(n_tensors);
  std::vector<uint64_t> info_offsets;
  info_offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t start = c.pos();
    TensorInfo t;
    MNEMO_RETURN_IF_ERROR(c.read_string(&t.name, "tensor name"));
    auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
    if (!inserted) {
      return Status::corruption("duplicate tensor name " + quoted(t.name) + at(start) +
                                " (first at byte offset " +
                                std::to_string(info_offsets[it->second]) + ")");
    }
    MNEMO_RETURN_IF_ERROR(read_tensor_info(c, alignment_, &t));
    tensors_.push_back(std::move(t));
    info_offsets.push_back(start);
  }

  // Data section: starts at the next multiple of the alignment (GGUF spec "File Structure").
  // gguf-py and ggml pad it even with no tensors; a file without tensors may stop before it.
  const auto data_offset = internal::align_up(c.pos(), alignment_);
  if (!data_offset) {
    return Status::corruption("data section offset overflows" + at(c.pos()));
  }
  data_offset_ = *data_offset;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorInfo& t = tensors_[i];
    const auto begin = checked_add(data_offset_, t.offset);
    const auto end = begin ? checked_add(*begin, t.n_bytes) : std::nullopt;
    if (!end || *end > bytes_.size()) {
      return Status::corruption("tensor " + quoted(t.name) + " data [data_offset " +
                                std::to_string(data_offset_) + " + " + std::to_string(t.offset) +
                                ", +" + std::to_string(t.n_bytes) +
                                " bytes) ends past the end of the file (" +
                                std::to_string(bytes_.size()) + " bytes)" + at(info_offsets[i]));
    }
    t.data = bytes_.data() + *begin;
  }
  return Status();
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::string File::architecture() const {
  const Value* v = find("general.architecture");
  const std::string* s = v ? v->as_string() : nullptr;
  return s ? *s : std::string();
}

namespace {

Status missing(std::string_view key) {
  return Status::not_found("metadata key '" + std::string(key) + "' not found");
}

Status wrong_type(std::string_view key, std::string_view expected, const Value& v) {
  return Status::invalid_argument("metadata key '" + std::string(key) + "' has type " +
                                  std::string(value_type_name(v.type)) + ", expected " +
                                  std::string(expected));
}

Status out_of_range(std::string_view key, const Value& v, std::string_view target) {
  std::string shown;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) shown = std::to_string(*u);
  if (const auto* s = std::get_if<int64_t>(&v.v)) shown = std::to_string(*s);
  return Status::invalid_argument("metadata key '" + std::string(key) + "' value " + shown +
                                  " does not fit " + std::string(target));
}

}  // namespace

Result<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!v->is_integer()) return wrong_type(key, "an integer", *v);
  auto u = v->as_uint();
  if (!u) return out_of_range(key, *v, "uint64 (negative)");
  return *u;
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!v->is_integer()) return wrong_type(key, "an integer", *v);
  auto i = v->as_int();
  if (!i) return out_of_range(key, *v, "int64");
  return *i;
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto d = v->as_double();
  if (!d) return wrong_type(key, "a float or an integer", *v);
  return *d;
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto b = v->as_bool();
  if (!b) return wrong_type(key, "bool", *v);
  return *b;
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const std::string* s = v->as_string();
  if (!s) return wrong_type(key, "string", *v);
  return *s;
}

Result<const Array*> File::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const Array* a = v->as_array();
  if (!a) return wrong_type(key, "array", *v);
  return a;
}

std::string File::arch_key(std::string_view suffix) const {
  return architecture() + "." + std::string(suffix);
}

Result<uint64_t> File::get_arch_uint(std::string_view suffix) const {
  if (architecture().empty()) {
    return Status::not_found(
        "metadata key 'general.architecture' (a string) not found; needed for '{arch}." +
        std::string(suffix) + "'");
  }
  return get_uint(arch_key(suffix));
}

Result<double> File::get_arch_float(std::string_view suffix) const {
  if (architecture().empty()) {
    return Status::not_found(
        "metadata key 'general.architecture' (a string) not found; needed for '{arch}." +
        std::string(suffix) + "'");
  }
  return get_float(arch_key(suffix));
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace mnemo::gguf
