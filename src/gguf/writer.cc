// GGUF v3 writer: validates metadata and tensors as they are added, then lays the file out as
// the GGUF spec ("File Structure") and gguf-py's GGUFWriter do: header, metadata, tensor infos,
// zero padding to the alignment, then each tensor's bytes zero-padded to the alignment.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "gguf/format.h"
#include "mnemo/gguf.h"

namespace mnemo::gguf {
namespace {

// llama.cpp's GGML_MAX_NAME: tensor names must be shorter (it rejects the file otherwise).
constexpr size_t kMaxTensorName = 64;

// Checks that a hand-built Value is well formed: the payload alternative matches `type`, an
// integer fits its declared width, array items all have elem_type, nesting is bounded.
Status validate_value(const Value& v, int depth, std::string_view where) {
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(std::string(where) + ": " + std::string(why));
  };
  auto check_uint = [&](uint64_t max) -> Status {
    const auto* u = std::get_if<uint64_t>(&v.v);
    if (!u) return bad(std::string(value_type_name(v.type)) + " value must hold uint64_t");
    if (*u > max) {
      return bad(std::to_string(*u) + " does not fit " + std::string(value_type_name(v.type)));
    }
    return Status();
  };
  auto check_int = [&](int64_t min, int64_t max) -> Status {
    const auto* s = std::get_if<int64_t>(&v.v);
    if (!s) return bad(std::string(value_type_name(v.type)) + " value must hold int64_t");
    if (*s < min || *s > max) {
      return bad(std::to_string(*s) + " does not fit " + std::string(value_type_name(v.type)));
    }
    return Status();
  };
  switch (v.type) {
    case ValueType::UINT8:
      return check_uint(UINT8_MAX);
    case ValueType::UINT16:
      return check_uint(UINT16_MAX);
    case ValueType::UINT32:
      return check_uint(UINT32_MAX);
    case ValueType::UINT64:
      return check_uint(UINT64_MAX);
    case ValueType::INT8:
      return check_int(INT8_MIN, INT8_MAX);
    case ValueType::INT16:
      return check_int(INT16_MIN, INT16_MAX);
    case ValueType::INT32:
      return check_int(INT32_MIN, INT32_MAX);
    case ValueType::INT64:
      return check_int(INT64_MIN, INT64_MAX);
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      if (!std::holds_alternative<double>(v.v)) return bad("float value must hold double");
      return Status();
    case ValueType::BOOL:
      if (!std::holds_alternative<bool>(v.v)) return bad("bool value must hold bool");
      return Status();
    case ValueType::STRING:
      if (!std::holds_alternative<std::string>(v.v)) return bad("string value must hold string");
      return Status();
    case ValueType::ARRAY: {
      const Array* a = std::get_if<Array>(&v.v);
      if (!a) return bad("array value must hold Array");
      if (depth >= kMaxArrayDepth) {
        return bad("array nesting deeper than " + std::to_string(kMaxArrayDepth));
      }
      if (!internal::is_known_value_type(static_cast<uint32_t>(a->elem_type))) {
        return bad("unknown array element type " +
                   std::to_string(static_cast<uint32_t>(a->elem_type)));
      }
      for (size_t i = 0; i < a->items.size(); ++i) {
        const Value& item = a->items[i];
        const std::string item_where = std::string(where) + "[" + std::to_string(i) + "]";
        if (item.type != a->elem_type) {
          return Status::invalid_argument(
              item_where + ": item type " + std::string(value_type_name(item.type)) +
              " differs from the array element type " + std::string(value_type_name(a->elem_type)));
        }
        MNEMO_RETURN_IF_ERROR(validate_value(item, depth + 1, item_where));
      }
      return Status();
    }
  }
  return bad("unknown value type " + std::to_string(static_cast<uint32_t>(v.type)));
}

class Sink {
 public:
  explicit Sink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T x) {  // little-endian host
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    out_->insert(out_->end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void pad_to(uint64_t align) { out_->resize(*internal::align_up(out_->size(), align), 0); }

 private:
  std::vector<uint8_t>* out_;
};

// Writes a validated value without its type tag (GGUF spec "gguf_metadata_value_t").
void put_value(Sink& s, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8:
      s.put(static_cast<uint8_t>(std::get<uint64_t>(v.v)));
      return;
    case ValueType::INT8:
      s.put(static_cast<int8_t>(std::get<int64_t>(v.v)));
      return;
    case ValueType::UINT16:
      s.put(static_cast<uint16_t>(std::get<uint64_t>(v.v)));
      return;
    case ValueType::INT16:
      s.put(static_cast<int16_t>(std::get<int64_t>(v.v)));
      return;
    case ValueType::UINT32:
      s.put(static_cast<uint32_t>(std::get<uint64_t>(v.v)));
      return;
    case ValueType::INT32:
      s.put(static_cast<int32_t>(std::get<int64_t>(v.v)));
      return;
    case ValueType::UINT64:
      s.put(std::get<uint64_t>(v.v));
      return;
    case ValueType::INT64:
      s.put(std::get<int64_t>(v.v));
      return;
    case ValueType::FLOAT32:
      s.put(static_cast<float>(std::get<double>(v.v)));
      return;
    case ValueType::FLOAT64:
      s.put(std::get<double>(v.v));
      return;
    case ValueType::BOOL:
      s.put(static_cast<uint8_t>(std::get<bool>(v.v) ? 1 : 0));
      return;
    case ValueType::STRING:
      s.put_string(std::get<std::string>(v.v));
      return;
    case ValueType::ARRAY: {
      const Array& a = std::get<Array>(v.v);
      s.put(static_cast<uint32_t>(a.elem_type));
      s.put<uint64_t>(a.items.size());
      for (const Value& item : a.items) put_value(s, item);
      return;
    }
  }
  CHECK(false) << "put_value on an unvalidated value";
}

}  // namespace

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  CHECK(internal::is_power_of_two(alignment) && alignment <= UINT32_MAX)
      << "GGUF alignment must be a power of two that fits a uint32, got " << alignment;
  if (alignment != kDefaultAlignment) {
    kv_.emplace_back("general.alignment", Value::u32(static_cast<uint32_t>(alignment)));
  }
}

Status Writer::add(std::string key, Value value) {
  if (key.empty()) return Status::invalid_argument("metadata key must not be empty");
  for (const auto& [k, v] : kv_) {
    if (k == key) {
      if (key == "general.alignment") {
        return Status::invalid_argument("general.alignment is set by the Writer constructor (" +
                                        std::to_string(alignment_) + ")");
      }
      return Status::invalid_argument("duplicate metadata key '" + key + "'");
    }
  }
  MNEMO_RETURN_IF_ERROR(validate_value(value, 0, "metadata key '" + key + "'"));
  if (key == "general.alignment" &&
      !(value.type == ValueType::UINT32 && value.as_uint() == alignment_)) {
    return Status::invalid_argument("general.alignment must be the uint32 " +
                                    std::to_string(alignment_) +
                                    " given to the Writer constructor");
  }
  kv_.emplace_back(std::move(key), std::move(value));
  return Status();
}

Status Writer::add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                          std::span<const uint8_t> data) {
  if (name.empty() || name.size() >= kMaxTensorName) {
    return Status::invalid_argument("tensor name '" + name + "' must be 1.." +
                                    std::to_string(kMaxTensorName - 1) + " bytes");
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return Status::invalid_argument("duplicate tensor name '" + name + "'");
  }
  if (!type_traits(static_cast<uint32_t>(type))) {
    return Status::invalid_argument("tensor '" + name + "' has unknown ggml type id " +
                                    std::to_string(static_cast<uint32_t>(type)));
  }
  uint64_t n_bytes = 0;
  if (auto err = internal::tensor_shape_error(dims, type, &n_bytes)) {
    return Status::invalid_argument("tensor '" + name + "': " + *err);
  }
  if (data.size() != n_bytes) {
    return Status::invalid_argument(
        "tensor '" + name + "' of type " + std::string(type_name(type)) + " needs " +
        std::to_string(n_bytes) + " bytes, got " + std::to_string(data.size()));
  }
  tensors_.push_back({std::move(name), std::move(dims), type, {data.begin(), data.end()}});
  return Status();
}

Status Writer::add_tensor_f32(std::string name, std::vector<int64_t> dims,
                              std::span<const float> data) {
  return add_tensor(
      std::move(name), std::move(dims), GgmlType::F32,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()));
}

std::vector<uint8_t> Writer::serialize() const {
  std::vector<uint8_t> out;
  Sink s(&out);
  s.put(kMagic);
  s.put(kVersion);
  s.put<uint64_t>(tensors_.size());
  s.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    s.put_string(key);
    s.put(static_cast<uint32_t>(value.type));
    put_value(s, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    s.put_string(t.name);
    s.put(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) s.put(static_cast<uint64_t>(d));
    s.put(static_cast<uint32_t>(t.type));
    s.put(offset);
    offset = *internal::align_up(offset + t.data.size(), alignment_);
  }
  s.pad_to(alignment_);
  for (const PendingTensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    s.pad_to(alignment_);
  }
  return out;
}

Status Writer::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::io_error("cannot create '" + path + "': " + std::strerror(errno));
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_err = n == bytes.size() ? 0 : errno;
  const int close_rc = std::fclose(f);
  if (n != bytes.size()) {
    return Status::io_error("cannot write '" + path + "': " + std::strerror(write_err));
  }
  if (close_rc != 0) {
    return Status::io_error("cannot close '" + path + "': " + std::strerror(errno));
  }
  return Status();
}

}  // namespace mnemo::gguf
