// Module-private declarations of the scalar reference row converters (src/quant/ref_*.cc).
//
// Each function converts one row of n elements; n is already validated as a non-negative
// multiple of the type's block size by the caller (dequantize_row / quantize_row in types.cc).
// Buffers: `vx` / `vy` hold row_size(type, n) bytes of blocks; `x` / `y` hold n floats.
#pragma once

#include <cstdint>

namespace mnemo::quant_internal {

/// One row of blocks -> n floats.
using DequantizeFn = void (*)(const void* vx, float* y, int64_t n);
/// n floats -> one row of blocks.
using QuantizeFn = void (*)(const float* x, void* vy, int64_t n);

// Scalar reference dequantize (ref_dequant.cc), bit-exact with ggml's dequantize_row_*.
void dequantize_row_f32(const void* vx, float* y, int64_t n);
void dequantize_row_f16(const void* vx, float* y, int64_t n);
void dequantize_row_bf16(const void* vx, float* y, int64_t n);

// Scalar reference quantize (ref_quant.cc), ggml's quantize_row_*_ref rounding.
void quantize_row_f32(const float* x, void* vy, int64_t n);
void quantize_row_f16(const float* x, void* vy, int64_t n);
void quantize_row_bf16(const float* x, void* vy, int64_t n);

}  // namespace mnemo::quant_internal
