// Scalar reference quantize: floats -> one row of blocks, with ggml's quantize_row_*_ref
// (non-imatrix) rounding.
#include <cstring>

#include "mnemo/quant.h"
#include "quant/ref.h"

namespace mnemo::quant_internal {

void quantize_row_f32(const float* x, void* vy, int64_t n) {
  std::memcpy(vy, x, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

void quantize_row_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

}  // namespace mnemo::quant_internal
