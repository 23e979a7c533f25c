// Module-private declarations of the scalar reference row converters (src/quant/ref_*.cc).
//
// Each function converts one row of n elements; the caller (dequantize_row / quantize_row in
// types.cc) has already checked that n is a non-negative multiple of the type's block size and
// that the block pointer is aligned to alignof(block). Buffers: `vx` / `vy` hold
// row_size(type, n) bytes of blocks (src/quant/blocks.h); `x` / `y` hold n floats. Source and
// destination must not overlap.
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
void dequantize_row_q4_0(const void* vx, float* y, int64_t n);
void dequantize_row_q4_1(const void* vx, float* y, int64_t n);
void dequantize_row_q5_0(const void* vx, float* y, int64_t n);
void dequantize_row_q5_1(const void* vx, float* y, int64_t n);
void dequantize_row_q8_0(const void* vx, float* y, int64_t n);
void dequantize_row_q2_K(const void* vx, float* y, int64_t n);
void dequantize_row_q3_K(const void* vx, float* y, int64_t n);
void dequantize_row_q4_K(const void* vx, float* y, int64_t n);
void dequantize_row_q5_K(const void* vx, float* y, int64_t n);
void dequantize_row_q6_K(const void* vx, float* y, int64_t n);
void dequantize_row_q8_K(const void* vx, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* vx, float* y, int64_t n);

// Scalar reference quantize (ref_quant.cc), ggml's quantize_row_*_ref rounding.
void quantize_row_f32(const float* x, void* vy, int64_t n);
void quantize_row_f16(const float* x, void* vy, int64_t n);
void quantize_row_bf16(const float* x, void* vy, int64_t n);
void quantize_row_q4_0(const float* x, void* vy, int64_t n);
void quantize_row_q4_1(const float* x, void* vy, int64_t n);
void quantize_row_q5_0(const float* x, void* vy, int64_t n);
void quantize_row_q5_1(const float* x, void* vy, int64_t n);
void quantize_row_q8_0(const float* x, void* vy, int64_t n);
void quantize_row_q8_K(const float* x, void* vy, int64_t n);
void quantize_row_iq4_nl(const float* x, void* vy, int64_t n);

}  // namespace mnemo::quant_internal
