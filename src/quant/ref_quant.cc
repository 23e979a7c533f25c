// Scalar reference quantize: floats -> one row of blocks, with ggml's quantize_row_*_ref
// (non-imatrix) rounding (ggml/src/ggml-quants.c).
//
// Bit-exact with gguf-py's gguf.quants.quantize for F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
// on finite input (gguf-py has no Q8_K / IQ4_NL quantize; those follow ggml's code and are tested
// against a numpy transcription). The float32 operations and their order are the reference's;
// do not reassociate them.
//
// Non-finite input: ggml's code converts NaN to an integer (undefined behaviour in C and C++).
// Here every float -> integer conversion is clamped first, so NaN / inf give some in-range
// quant instead; such rows dequantize to garbage, but nothing here is undefined. Inputs in the
// normal range are unaffected by the clamps (they never bind there).
#include <bit>
#include <cmath>
#include <cstring>

#include "mnemo/quant.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"

namespace mnemo::quant_internal {
namespace {

// Clamps v to [lo, hi]; NaN becomes lo.
inline float clampf(float v, float lo, float hi) {
  if (!(v >= lo)) return lo;
  return v > hi ? hi : v;
}

// trunc(v) for v already in a small range (C's float -> int conversion).
inline int trunc_small(float v) { return static_cast<int>(v); }

// roundf(v) (half away from zero) for |v| < 2^23, without a libm call: the difference between
// |v| and its truncation is exact in float, so comparing it with 0.5 decides the rounding.
inline int round_half_away(float v) {
  const float a = std::fabs(v);
  const int t = static_cast<int>(a);
  const int r = t + ((a - static_cast<float>(t)) >= 0.5f ? 1 : 0);
  return v < 0 ? -r : r;
}

// Round to nearest, ties to even, for |v| <= 2^22 - 1: adding 1.5 * 2^23 pushes the fraction
// out of the mantissa under the default rounding mode; the low 23 bits then hold 2^22 + round(v).
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

// Index of the level in kIq4nlValues nearest to v; exactly halfway goes to the upper level.
// Comparing 2v with the sum of two neighbours is exact in float (ggml's current best_index_int8).
inline int best_index_iq4nl(float v) {
  const float v2 = v + v;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    const float mid2 = static_cast<float>(kIq4nlValues[j - 1] + kIq4nlValues[j]);
    idx = v2 >= mid2 ? j : idx;
  }
  return idx;
}

// Value of largest magnitude in x[0, n) with its sign; the first one on ties. 0 if all are 0.
inline float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    if (amax < a) {
      amax = a;
      max = x[j];
    }
  }
  *amax_out = amax;
  return max;
}

inline void min_max(const float* x, int n, float* min_out, float* max_out) {
  float mn = x[0];
  float mx = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  *min_out = mn;
  *max_out = mx;
}

// The 32 quants of a Q4_0 / Q5_0 block of x (bits 4 / 5) into q, as the comment of
// quantize_row_q4_0 says; returns the scale d.
inline float symmetric_quants(const float* x, int bits, int* q) {
  const int half = 1 << (bits - 1);
  float amax;
  const float max = signed_absmax(x, 32, &amax);
  const float d = max / static_cast<float>(-half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float offset = static_cast<float>(half) + 0.5f;  // 8.5 / 16.5, exact
  const float top = static_cast<float>(2 * half - 1);
  for (int j = 0; j < 32; ++j) q[j] = trunc_small(clampf(x[j] * id + offset, 0.0f, top));
  return d;
}

// The 32 quants of a Q4_1 / Q5_1 block of x (bits 4 / 5) into q, its scale d and min m (fp16)
// into *d_half and *m_half, as the comment of quantize_row_q4_1 says.
inline void min_quants(const float* x, int bits, uint16_t* d_half, uint16_t* m_half, int* q) {
  const float top = static_cast<float>((1 << bits) - 1);
  float mn;
  float mx;
  min_max(x, 32, &mn, &mx);
  const float d = (mx - mn) / top;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_half = float_to_half(d);
  *m_half = float_to_half(mn);
  for (int j = 0; j < 32; ++j) q[j] = trunc_small(clampf((x[j] - mn) * id + 0.5f, 0.0f, top));
}

// The 32 quants q of a Q4_0 / Q4_1 / IQ4_NL block (each 0..15) into qs: element j in the low nibble
// of qs[j], element j + 16 in the high nibble.
inline void pack_4bit(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

// The 32 quants q of a Q5_0 / Q5_1 block (each 0..31): their low four bits into qs as pack_4bit,
// bit 4 of element j into bit j of the little-endian 32-bit qh.
inline void pack_5bit(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    qh |= static_cast<uint32_t>(q[j] >> 4) << j;
    qh |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void quantize_row_f32(const float* x, void* vy, int64_t n) {
  std::memcpy(vy, x, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = float_to_half(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

void quantize_row_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = float_to_bf16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// Q4_0 and Q5_0 (bits 4 / 5, half = 2^(bits - 1): 8 / 16):
// d = (signed absmax) / -half, q = min(2^bits - 1, trunc(x / d + half + 0.5)).
void quantize_row_q4_0(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q4_0*>(vy);
  for (int64_t i = 0; i < n / kQK4_0; ++i, ++b, x += kQK4_0) {
    int q[kQK4_0];
    b->d = float_to_half(symmetric_quants(x, 4, q));
    pack_4bit(q, b->qs);
  }
}

void quantize_row_q5_0(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q5_0*>(vy);
  for (int64_t i = 0; i < n / kQK5_0; ++i, ++b, x += kQK5_0) {
    int q[kQK5_0];
    b->d = float_to_half(symmetric_quants(x, 5, q));
    pack_5bit(q, b->qs, b->qh);
  }
}

// Q4_1 and Q5_1: d = (max - min) / (2^bits - 1), m = min,
// q = min(2^bits - 1, trunc((x - min) / d + 0.5)).
void quantize_row_q4_1(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q4_1*>(vy);
  for (int64_t i = 0; i < n / kQK4_1; ++i, ++b, x += kQK4_1) {
    int q[kQK4_1];
    min_quants(x, 4, &b->d, &b->m, q);
    pack_4bit(q, b->qs);
  }
}

void quantize_row_q5_1(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q5_1*>(vy);
  for (int64_t i = 0; i < n / kQK5_1; ++i, ++b, x += kQK5_1) {
    int q[kQK5_1];
    min_quants(x, 5, &b->d, &b->m, q);
    pack_5bit(q, b->qs, b->qh);
  }
}

// d = absmax / 127, q = roundf(x / d) (half away from zero).
void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / kQK8_0; ++i, ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = float_to_half(d);
    for (int j = 0; j < kQK8_0; ++j) {
      b->qs[j] = static_cast<int8_t>(round_half_away(clampf(x[j] * id, -127.0f, 127.0f)));
    }
  }
}

// iscale = -127 / (signed absmax), q = min(127, round_even(iscale * x)), d = 1 / iscale (float32),
// bsums[g] = sum of q over elements [16g, 16g + 16). An all-zero block gives d = 0, q = 0,
// bsums = 0 (ggml leaves bsums unwritten there).
void quantize_row_q8_K(const float* x, void* vy, int64_t n) {
  auto* b = static_cast<block_q8_K*>(vy);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b, x += kQK_K) {
    float amax;
    const float max = signed_absmax(x, kQK_K, &amax);
    if (amax == 0.0f) {
      std::memset(b, 0, sizeof(*b));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      b->qs[j] = static_cast<int8_t>(nearest_int(clampf(iscale * x[j], -128.0f, 127.0f)));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b->qs[16 * g + l];
      b->bsums[g] = static_cast<int16_t>(sum);
    }
    b->d = 1 / iscale;
  }
}

// ggml's quantize_row_iq4_nl_ref: quantize_row_iq4_nl_impl with no importance weights and
// ntry = -1, i.e. one pass. Per block: weights w = x^2; start from d0 = (signed absmax) / -127,
// pick for each x the level nearest to x / d0, then set d to the weighted least-squares scale
// sum(w q x) / sum(w q q) for those levels. Blocks with absmax < 1e-15 get d = 0, all indices 0.
void quantize_row_iq4_nl(const float* x, void* vy, int64_t n) {
  constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS
  auto* b = static_cast<block_iq4_nl*>(vy);
  for (int64_t i = 0; i < n / kQK4_NL; ++i, ++b, x += kQK4_NL) {
    float amax;
    const float max = signed_absmax(x, kQK4_NL, &amax);
    int idx[kQK4_NL] = {};
    float d = 0.0f;
    if (amax >= kGroupMaxEps) {
      const float id = 1 / (max / static_cast<float>(kIq4nlValues[0]));
      float sumqx = 0.0f;
      float sumq2 = 0.0f;
      for (int j = 0; j < kQK4_NL; ++j) {
        const int l = best_index_iq4nl(id * x[j]);
        idx[j] = l;
        const float q = static_cast<float>(kIq4nlValues[l]);
        const float w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    }
    b->d = float_to_half(d);
    pack_4bit(idx, b->qs);
  }
}

}  // namespace mnemo::quant_internal
