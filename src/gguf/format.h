// Private helpers shared by the GGUF reader and writer: encoded sizes of metadata values and
// overflow-checked arithmetic. Format facts come from the GGUF spec (ggml docs/gguf.md); the
// public constants live in include/mnemo/gguf.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "mnemo/gguf.h"

namespace mnemo::gguf::internal {

/// True for the 13 value type ids of GGUF spec "gguf_metadata_value_type" (0..12).
inline bool is_known_value_type(uint32_t id) {
  return id <= static_cast<uint32_t>(ValueType::FLOAT64);
}

/// Bytes of a fixed-size scalar (1, 2, 4 or 8), or 0 for STRING / ARRAY.
inline uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
    case ValueType::ARRAY:
      return 0;
  }
  return 0;
}

/// Fewest bytes one value of type t can take on disk (without its type tag): a scalar's size,
/// 8 for a string (u64 length), 12 for an array (u32 element type + u64 count). Dividing the
/// bytes left by it bounds any count before memory is reserved for it.
inline uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::STRING:
      return 8;
    case ValueType::ARRAY:
      return 12;
    default:
      return scalar_size(t);
  }
}

/// Smallest encoding of one key/value pair: u64 key length + u32 type + a 1-byte value.
inline constexpr uint64_t kMinKvSize = 8 + 4 + 1;
/// Smallest encoding of one tensor info: u64 name length + u32 n_dims + u32 type + u64 offset.
inline constexpr uint64_t kMinTensorInfoSize = 8 + 4 + 4 + 8;
/// Header: magic, version, n_tensors, n_kv.
inline constexpr uint64_t kHeaderSize = 4 + 4 + 8 + 8;

/// a * b, or nullopt on uint64 overflow.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b, or nullopt on uint64 overflow.
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// x rounded up to a multiple of `align` (a power of two), or nullopt on overflow.
inline std::optional<uint64_t> align_up(uint64_t x, uint64_t align) {
  auto r = checked_add(x, align - 1);
  if (!r) return std::nullopt;
  return *r & ~(align - 1);
}

inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/// Validates a tensor shape for a known type and computes its data size. Shape rules (ggml):
/// at most kMaxDims dims, each >= 1, element count <= INT64_MAX, dims[0] a multiple of the
/// block size (quant check_row_shape), byte size within uint64. A 0-dimensional tensor is a
/// scalar (one element). Returns the problem as text (no offset, no tensor name), or nullopt
/// with *n_bytes set.
std::optional<std::string> tensor_shape_error(std::span<const int64_t> dims, GgmlType type,
                                              uint64_t* n_bytes);

}  // namespace mnemo::gguf::internal
