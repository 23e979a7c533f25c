// Inline scalar fp16 / bf16 <-> fp32 conversions for the row loops of src/quant/; the public
// out-of-line versions in mnemo/quant.h (fp16_to_fp32, ...) forward here. Semantics are
// documented there (round to nearest even, ggml's NaN handling); tests in quant_test.cc.
#pragma once

#include <bit>
#include <cstdint>

namespace mnemo::quant_internal {

// Half -> float by exponent rebasing: shift exponent and mantissa into float position, add the
// bias difference; inf / NaN get the exponent pushed to all-ones (NaNs quieted), and subnormal
// halves (exponent 0) are renormalized by letting the FPU subtract the implicit bit.
inline float half_to_float(uint16_t h) {
  constexpr uint32_t kExpMask = 0x0f800000u;        // half exponent bits after << 13
  constexpr uint32_t kRebias = (127u - 15u) << 23;  // float bias minus half bias
  uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = bits & kExpMask;
  bits += kRebias;
  if (exp == kExpMask) {
    bits += kRebias;                              // exponent 0xff: inf or NaN
    if (bits & 0x007fffffu) bits |= 0x00400000u;  // NaN: quiet bit (as ggml / F16C)
  } else if (exp == 0) {
    // Subnormal half m * 2^-24: currently encodes (1 + m/1024) * 2^-14; subtract 2^-14.
    bits += 1u << 23;
    bits = std::bit_cast<uint32_t>(std::bit_cast<float>(bits) - std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// Float -> half, round to nearest even; NaN -> 0x7e00 with the sign (ggml's choice).
inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x38800000u) {    // |f| >= 2^-14: normal half, inf or NaN
    if (ax >= 0x477ff000u) {  // rounds to >= 65520 (or inf / NaN)
      return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
    }
    // Drop 13 mantissa bits with round-to-nearest-even; a carry out of the mantissa correctly
    // bumps the exponent.
    const uint32_t rebased = ax - ((127u - 15u) << 23);
    return sign | static_cast<uint16_t>((rebased + 0x0fffu + ((rebased >> 13) & 1u)) >> 13);
  }
  if (ax < 0x33000000u) return sign;  // below 2^-25 (half the smallest subnormal): +-0
  // Subnormal half: |f| / 2^-24 rounded to nearest even.
  const uint32_t e = ax >> 23;                      // biased float exponent, 102..112
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const uint32_t shift = 126u - e;                  // 14..24
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return sign | static_cast<uint16_t>(q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u));
}

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Float -> bf16, round to nearest even; a NaN keeps its top 16 bits with the quiet bit set.
inline uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace mnemo::quant_internal
