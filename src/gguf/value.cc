// Metadata values: type names, typed views and deep equality (GGUF spec
// "gguf_metadata_value_type", "gguf_metadata_value_t").
#include <limits>

#include "gguf/format.h"
#include "mnemo/gguf.h"

namespace mnemo::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

// Integers live in the uint64_t alternative (unsigned types) or the int64_t one (signed types);
// the checks below look at the alternative actually held, so a hand-built Value whose payload
// disagrees with `type` yields nullopt rather than a wrong number.
std::optional<int64_t> Value::as_int() const {
  if (!is_integer()) return std::nullopt;
  if (const auto* s = std::get_if<int64_t>(&v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<uint64_t> Value::as_uint() const {
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v)) {
    if (*s < 0) return std::nullopt;
    return static_cast<uint64_t>(*s);
  }
  return std::nullopt;
}

std::optional<double> Value::as_double() const {
  if (is_float()) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  }
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* s = std::get_if<int64_t>(&v)) return static_cast<double>(*s);
  return std::nullopt;
}

const std::string* Value::as_string() const {
  return type == ValueType::STRING ? std::get_if<std::string>(&v) : nullptr;
}

const Array* Value::as_array() const {
  return type == ValueType::ARRAY ? std::get_if<Array>(&v) : nullptr;
}

std::optional<bool> Value::as_bool() const {
  if (type != ValueType::BOOL) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

bool operator==(const Array& a, const Array& b) {
  return a.elem_type == b.elem_type && a.items == b.items;
}

bool operator==(const Value& a, const Value& b) { return a.type == b.type && a.v == b.v; }

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the reader and writer reject shapes whose product overflows
  return n;
}

namespace internal {

std::optional<std::string> tensor_shape_error(std::span<const int64_t> dims, GgmlType type,
                                              uint64_t* n_bytes) {
  if (dims.size() > kMaxDims) {
    return std::to_string(dims.size()) + " dimensions, more than the maximum " +
           std::to_string(kMaxDims);
  }
  uint64_t n_elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1) {
      return "dimension " + std::to_string(i) + " is " + std::to_string(dims[i]) + ", must be >= 1";
    }
    auto n = checked_mul(n_elements, static_cast<uint64_t>(dims[i]));
    if (!n || *n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return "element count overflows int64 at dimension " + std::to_string(i);
    }
    n_elements = *n;
  }
  const int64_t row = dims.empty() ? 1 : dims[0];
  Status row_ok = check_row_shape(type, row);
  if (!row_ok.ok()) return row_ok.message();
  const TypeTraits& tt = traits(type);
  // bytes = (elements / block_size) * type_size; elements is a multiple of block_size because
  // the row length is.
  auto bytes = checked_mul(n_elements / tt.block_size, tt.type_size);
  if (!bytes) return "data size overflows uint64";
  *n_bytes = *bytes;
  return std::nullopt;
}

}  // namespace internal

}  // namespace mnemo::gguf
