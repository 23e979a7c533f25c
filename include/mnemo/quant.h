// Tensor element types of GGUF / ggml: numeric ids, block layouts, and scalar reference
// quantize / dequantize.
//
// Source: the GGUF specification (ggml-org/ggml docs/gguf.md, "ggml_type") for the ids, and
// ggml's block definitions (ggml-common.h) for the block sizes and byte layouts; the numbers are
// facts of the file format, repeated here with static_asserts in src/quant/blocks.h.
//
// A "row" of n elements of type t occupies row_size(t, n) bytes and n must be a multiple of
// block_size(t). All data is little-endian, as in GGUF files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "mnemo/status.h"

namespace mnemo {

/// ggml_type ids exactly as stored in GGUF tensor infos (GGUF spec, "ggml_type").
/// Gaps (4, 5, 31..33, 36..38) are ids retired by ggml; readers reject them.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

/// Static facts about one type.
struct TypeTraits {
  GgmlType type;
  std::string_view name;  // lower-case ggml name: "f32", "q4_0", "q4_K", "iq4_nl", "bf16"
  uint32_t block_size;    // elements per block (1 for plain types)
  uint32_t type_size;     // bytes per block
  bool can_dequantize;    // mnemo has a reference dequantize for it
  bool can_quantize;      // mnemo has a reference quantize for it
};

/// Traits of a known type id, or nullopt for an unknown / retired id (e.g. 4, 31, 1000).
std::optional<TypeTraits> type_traits(uint32_t type_id);
/// Traits of a known type (always succeeds).
const TypeTraits& traits(GgmlType type);

/// "q4_0", "q4_K", ...; "unknown" for an id without traits.
std::string_view type_name(GgmlType type);
/// Parses a type name, case-insensitively ("q8_0", "Q8_0", "f16", "q4_k").
std::optional<GgmlType> type_from_name(std::string_view name);

/// The element types a KV cache may store: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
/// iq4_nl (in this order). Each has a reference quantize and dequantize, and attention reads it
/// in place. Names map to types through type_name / type_from_name.
inline constexpr GgmlType kKvCacheTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
};
/// True for a type in kKvCacheTypes.
bool is_kv_cache_type(GgmlType type);
/// The names of kKvCacheTypes joined by ", " ("f32, f16, ..., iq4_nl"), for help texts and
/// error messages.
std::string_view kv_cache_type_names();

inline uint32_t block_size(GgmlType t) { return traits(t).block_size; }
inline uint32_t type_size(GgmlType t) { return traits(t).type_size; }

/// Bytes taken by n elements of type t. n must be a multiple of block_size(t) (CHECKed: callers
/// validate outside input first with check_row_shape()).
size_t row_size(GgmlType t, int64_t n);

/// Validates that a row of n elements of type t is well formed: n >= 0 and a multiple of the
/// block size. Returns InvalidArgument naming the type and n otherwise.
Status check_row_shape(GgmlType t, int64_t n);

/// Converts n elements of type t at src (row_size(t, n) bytes) into n floats at dst.
/// Returns NotSupported ("type X is not supported for dequantize") for types without a
/// reference implementation, InvalidArgument for a bad n. Bit-exact with ggml's reference
/// dequantize_row_* (verified against the `gguf` PyPI package's gguf.quants and against
/// libggml-base itself). Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
/// Q8_K, IQ4_NL (traits(t).can_dequantize).
/// Preconditions (CHECKed, they are bugs, not input errors): src is aligned to the block's
/// alignment (2 bytes; 4 for Q8_K; any row start inside a GGUF tensor or a float buffer is),
/// src and dst do not overlap. Cost: one table lookup, then a plain loop; thread-safe.
Status dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

/// Converts n floats at src into type t at dst (row_size(t, n) bytes), with ggml's reference
/// (non-imatrix) rounding, quantize_row_*_ref. NotSupported for types without a reference
/// quantize. Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K, IQ4_NL
/// (traits(t).can_quantize). Bit-exact with ggml for finite input; NaN / inf input gives
/// unspecified (but defined) blocks. Preconditions as for dequantize_row (dst aligned).
Status quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

/// Scalar IEEE half <-> float (round to nearest even; overflow to inf; NaN -> 0x7e00 with the
/// sign, and a NaN half widens to a quiet NaN with its payload), and bf16 <-> float (round to
/// nearest even; a NaN narrows to its top 16 bits with the quiet bit set), as ggml's reference
/// converters (ggml-impl.h) bit for bit, for all inputs.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace mnemo
