// Per-target declarations that connect the matmul translation units: the shared core
// (matmul_core.cc: activation quantization, micro-kernels, tiling and threading) and the
// per-weight-type units (matmul_<type>.cc: the row unpackers and the exported entry point).
// Included once per Highway target (toggle guard below); all these functions live in the
// target's namespace, so a call between them never crosses targets.

#if defined(MNEMO_KERNELS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_MATMUL_INL_H_
#undef MNEMO_KERNELS_MATMUL_INL_H_
#else
#define MNEMO_KERNELS_MATMUL_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

/// One row of n_in elements of `type` -> n_pad floats (zero past n_in).
using FloatUnpackFn = void (*)(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad,
                               float* out);

/// Register tile of float dot products: y[c * y_stride + r] = sum_i w[r][i] * x[c][i] over
/// n_pad elements (a multiple of 64), for r < n_rows, c < n_cols. Rows past n_rows / columns
/// past n_cols may repeat valid pointers (they are computed and dropped).
struct FloatTileArgs {
  const float* w[kTileRows];
  const float* x[kTileCols];
  int64_t n_pad = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  int n_rows = 0;
  int n_cols = 0;
};
void FloatTile(const FloatTileArgs& t);

/// Matmul with float weights (F32 / F16 / BF16; every type where there is no integer dot):
/// rows are unpacked to float and multiplied with FMA.
void MatmulFloat(const internal::MatmulArgs& args, FloatUnpackFn unpack);

/// Dequantizes with the scalar reference (quant's dequantize_row), zero padding to n_pad.
void UnpackRowRef(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out);
// SIMD float unpackers (matmul_f32.cc, matmul_f16.cc, matmul_bf16.cc).
void UnpackRowF32(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out);
void UnpackRowF16(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out);
void UnpackRowBF16(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out);

/// The float unpacker for a type: SIMD for F32 / F16 / BF16, the reference otherwise.
FloatUnpackFn GetFloatUnpack(GgmlType type);

#if MNEMO_INT_DOT

/// One row -> its unpacked form (quant_unpack-inl.h): w8[n_pad], dw[n_pad / 4], cw[n_off].
using IntUnpackFn = void (*)(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                             uint8_t* w8, float* dw, float* cw);

/// A weight type's unpacker and the shape of its unpacked form.
struct IntKernel {
  IntUnpackFn unpack = nullptr;
  IntFormat format;
};

/// Activations quantized to 8 bits (the form the integer micro-kernel reads), one row per
/// token: q[n_pad] int8 in [-127, 127], dx[n_pad / 4] the row's block scale (amax / 127 of its
/// 32-element block) for each group of 4, sx[n_off] = dx * (sum of q over each group of G).
struct QuantRows {
  int8_t* q = nullptr;
  float* dx = nullptr;
  float* sx = nullptr;
  int64_t n_pad = 0;
  int64_t n_off = 0;
  int group = 0;
};

/// Quantizes n_rows rows of n_in floats (row stride x_stride) into `out` (row r at
/// out.q + r * n_pad, out.dx + r * n_pad / 4, out.sx + r * n_off).
void QuantizeRows(const float* x, int64_t x_stride, int64_t n_rows, int64_t n_in,
                  const QuantRows& out);

/// Register tile of integer dot products, for the unpacked rows w (weights) and quantized
/// rows a (tokens):
///   y[c * y_stride + r] = sum_lanes dw[r] * dx[c] * dot4(w[r], a[c]) + sum_g cw[r][g] sx[c][g]
/// over n_pad elements (the offsets only when n_off > 0).
struct IntTileArgs {
  const uint8_t* w[kTileRows];
  const float* dw[kTileRows];
  const float* cw[kTileRows];
  const int8_t* a[kTileCols];
  const float* dx[kTileCols];
  const float* sx[kTileCols];
  int64_t n_pad = 0;
  int64_t n_off = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  int n_rows = 0;
  int n_cols = 0;
};
void IntTile(const IntTileArgs& t, bool is_signed);

/// Matmul with integer dots: quantizes x once, unpacks weight rows per task, tiles.
void MatmulInt(const internal::MatmulArgs& args, const IntKernel& kernel);

// Row unpackers of the quantized types (one per matmul_<type>.cc).
void UnpackRowQ4_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ4_1(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ5_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ5_1(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ8_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowIQ4_NL(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                     float* dw, float* cw);
void UnpackRowQ4_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ5_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);
void UnpackRowQ6_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw);

/// The integer kernel of a quantized type; false for float types.
bool GetIntKernel(GgmlType type, IntKernel* kernel);

#endif  // MNEMO_INT_DOT

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_MATMUL_INL_H_
