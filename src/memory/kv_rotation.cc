// Walsh-Hadamard rotation of K/V heads and row conversion between storage formats
// (src/memory/kv_rotation.h).
#include "memory/kv_rotation.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace mnemo {

bool is_valid_kv_rotation(uint32_t d) {
  return d == 0 || (d >= 2 && d <= 4096 && std::has_single_bit(d));
}

bool is_quantized_kv_type(GgmlType t) { return is_kv_cache_type(t) && block_size(t) > 1; }

uint32_t kv_rotation_for(uint32_t dim, GgmlType k_type, GgmlType v_type) {
  if (dim == 0) return 0;
  return is_quantized_kv_type(k_type) || is_quantized_kv_type(v_type) ? dim : 0;
}

void hadamard_rotate(float* x, int64_t n, uint32_t d) {
  CHECK(d >= 2 && std::has_single_bit(d)) << "rotation size " << d;
  CHECK(n % d == 0) << "row of " << n << " elements, rotation size " << d;
  const float norm = 1.0f / std::sqrt(float(d));
  for (int64_t b = 0; b < n; b += d) {
    float* h = x + b;
    // Fast transform: log2(d) butterfly stages (a, b) -> (a + b, a - b) at distance len. Stages
    // of distance >= 8 run over fixed groups of 8 lanes, which compilers vectorize at -O2.
    uint32_t len = 1;
    for (; len < d && len < 8; len <<= 1) {
      for (uint32_t i = 0; i < d; i += 2 * len) {
        for (uint32_t j = i; j < i + len; ++j) {
          const float a = h[j];
          const float c = h[j + len];
          h[j] = a + c;
          h[j + len] = a - c;
        }
      }
    }
    for (; len < d; len <<= 1) {
      for (uint32_t i = 0; i < d; i += 2 * len) {
        for (uint32_t j = i; j < i + len; j += 8) {
          float* p = h + j;
          float* q = h + j + len;
          for (int k = 0; k < 8; ++k) {
            const float a = p[k];
            const float c = q[k];
            p[k] = a + c;
            q[k] = a - c;
          }
        }
      }
    }
    for (uint32_t j = 0; j < d; ++j) h[j] *= norm;
  }
}

namespace {

// Quantized blocks must be 2-byte aligned (quant.h); a state read from an arbitrary caller
// buffer may not be.
bool aligned_for(GgmlType t, const void* p) {
  return t == GgmlType::F32 || (reinterpret_cast<uintptr_t>(p) & 3) == 0;
}

}  // namespace

Status kv_row_convert(GgmlType src_type, uint32_t src_rot, const void* src, GgmlType dst_type,
                      uint32_t dst_rot, void* dst, int64_t n, float* scratch) {
  if (src_type == dst_type && src_rot == dst_rot) {
    std::memcpy(dst, src, row_size(src_type, n));
    return Status();
  }
  thread_local std::vector<uint8_t> bounce;
  const void* in = src;
  if (!aligned_for(src_type, src)) {
    bounce.resize(row_size(src_type, n) + 8);
    uint8_t* b = bounce.data() + ((8 - (reinterpret_cast<uintptr_t>(bounce.data()) & 7)) & 7);
    std::memcpy(b, src, row_size(src_type, n));
    in = b;
  }
  MNEMO_RETURN_IF_ERROR(dequantize_row(src_type, in, scratch, n));
  if (src_rot != dst_rot) {
    if (src_rot != 0) hadamard_rotate(scratch, n, src_rot);  // H is its own inverse
    if (dst_rot != 0) hadamard_rotate(scratch, n, dst_rot);
  }
  if (aligned_for(dst_type, dst)) return quantize_row(dst_type, scratch, dst, n);
  std::vector<uint8_t> out(row_size(dst_type, n) + 8);
  uint8_t* o = out.data() + ((8 - (reinterpret_cast<uintptr_t>(out.data()) & 7)) & 7);
  MNEMO_RETURN_IF_ERROR(quantize_row(dst_type, scratch, o, n));
  std::memcpy(dst, o, row_size(dst_type, n));
  return Status();
}

}  // namespace mnemo
