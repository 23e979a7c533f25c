// Scalar reference twins of the kernels in mnemo/kernels.h: plain loops, double accumulators,
// weights and cache rows through quant's reference dequantize_row. They define what the SIMD
// kernels compute; kernels_test compares the two on every compiled Highway target.
// Single-threaded and slow on purpose; not for production paths.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace mnemo::kernels::ref {

/// The activation quantization of the integer matmul, emulated in scalar code: each block of 32
/// becomes d * q with d = amax / 127 and q = round-half-even(x * (127 / amax)) (float math, the
/// same operations as the SIMD code). out may alias x. n is a multiple of 32.
void quantize_dequantize_q8(const float* x, int64_t n, float* out);

/// y[t][r] = sum_i x[t][i] * W[r][i] with W dequantized by quant's dequantize_row, accumulated in
/// double. With quantize_x, each row of x first goes through quantize_dequantize_q8 (what the
/// integer kernels see). x: [n_tokens x n_in], y: [n_tokens x n_out], contiguous.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, bool quantize_x);

void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y);
void softmax(float* x, int64_t n_rows, int64_t n);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void gelu_mul(const float* gate, const float* up, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void gelu(const float* x, int64_t n, float* out);
void add(const float* a, const float* b, int64_t n, float* out);
void mul(const float* a, const float* b, int64_t n, float* out);
void scale(float* x, int64_t n, float s);
void softcap(float* x, int64_t n, float cap);

/// RoPE with the angle of every pair computed directly in double (no table).
void rope(const RopeParams& p, const int32_t* pos, int64_t n_tokens, int64_t n_head,
          int64_t head_dim, float* x);

/// attention() with K and V rows dequantized by quant's dequantize_row and a two-pass softmax in
/// double. With quantize_q, each head's Q vector first goes through quantize_dequantize_q8 (what
/// the integer score path sees for quantized K types).
void attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, bool quantize_q);

}  // namespace mnemo::kernels::ref
