// Scalar reference dequantize: one row of blocks -> floats, bit-exact with ggml's
// dequantize_row_* (ggml-quants.c) and with gguf-py's gguf.quants.dequantize.
#include <cstring>

#include "mnemo/quant.h"
#include "quant/ref.h"

namespace mnemo::quant_internal {

void dequantize_row_f32(const void* vx, float* y, int64_t n) {
  std::memcpy(y, vx, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = fp16_to_fp32(h);
  }
}

void dequantize_row_bf16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = bf16_to_fp32(h);
  }
}

}  // namespace mnemo::quant_internal
