// Per-weight-type "unpack": one GGUF row -> the dot-friendly form the integer micro-kernels
// read. Included once per Highway target (toggle guard below); everything here is inline and
// only compiled on targets with the 8-bit integer dot (MNEMO_INT_DOT, see simd-inl.h).
//
// The unpacked form of a row of n_in elements (padded to n_pad, a multiple of 64):
//   w8[n_pad]   one byte u_i per element, in element order: unsigned, or int8 when the format
//               says is_signed (targets without VNNI: Q8_0, IQ4_NL);
//   dw[n_pad/4] the scale of each group of 4 elements (so one float per int32 lane of a dot);
//   cw[n_off]   the offset of each group of G elements (G = 16 or 32; absent when G = 0);
// such that element i = dw[i/4] * u_i + cw[i/G], and zero in the padding (u = dw = cw = 0).
// Every type fits this form (block layouts: src/quant/blocks.h):
//   Q4_0  u = q,          dw = d,          cw = -8 d        (G = 32)
//   Q4_1  u = q,          dw = d,          cw = m           (G = 32)
//   Q5_0  u = q,          dw = d,          cw = -16 d       (G = 32)
//   Q5_1  u = q,          dw = d,          cw = m           (G = 32)
//   Q8_0  u = q (int8),   dw = d                            (G = 0)   without VNNI
//         u = q + 128,    dw = d,          cw = -128 d      (G = 32)  with VNNI
//   IQ4_NL as Q8_0 with q = kIq4nlValues[nibble]
//   Q4_K  u = q,          dw = d sc_j,     cw = -dmin m_j   (G = 32, j = sub-block of 32)
//   Q5_K  as Q4_K with the fifth bit
//   Q6_K  u = q (0..63),  dw = d sc_j,     cw = -32 d sc_j  (G = 16, j = sub-block of 16)
// so one integer micro-kernel serves all of them: sum_i w_i x_i =
//   sum_lanes dw * dx * (sum of 4 u*a) + sum_groups cw * (dx * sum of a over the group).

#if defined(MNEMO_KERNELS_QUANT_UNPACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_QUANT_UNPACK_INL_H_
#undef MNEMO_KERNELS_QUANT_UNPACK_INL_H_
#else
#define MNEMO_KERNELS_QUANT_UNPACK_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/simd-inl.h"
#include "quant/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

// ---- Float types: a row -> n_pad floats (zero past n_in) -------------------------------------

HWY_INLINE void ZeroTail(int64_t n_in, int64_t n_pad, float* out) {
  if (n_pad > n_in) std::memset(out + n_in, 0, (n_pad - n_in) * sizeof(float));
}

HWY_INLINE void UnpackF32(const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  std::memcpy(out, row, n_in * sizeof(float));
  ZeroTail(n_in, n_pad, out);
}

HWY_INLINE void UnpackF16(const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(row);
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (; i + nf <= n_in; i += nf) {
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i))),
               df, out + i);
  }
#endif
  for (; i < n_in; ++i) out[i] = F16ToF32(src[i]);
  ZeroTail(n_in, n_pad, out);
}

HWY_INLINE void UnpackBF16(const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(row);
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::bfloat16_t, decltype(df)> dh;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (; i + nf <= n_in; i += nf) {
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(src + i))),
               df, out + i);
  }
#endif
  for (; i < n_in; ++i) out[i] = mnemo::bf16_to_fp32(src[i]);
  ZeroTail(n_in, n_pad, out);
}

/// Q8_0 row -> n_pad floats directly (d * q), for V rows in attention.
HWY_INLINE void DequantQ8_0Direct(const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  const block_q8_0* blocks = reinterpret_cast<const block_q8_0*>(row);
#if HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t nf = hn::Lanes(df);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    const auto s = hn::Set(df, F16ToF32(blocks[b].d));
    for (size_t j = 0; j < 32; j += nf) {
      const auto q = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, blocks[b].qs + j)));
      hn::StoreU(hn::Mul(q, s), df, out + 32 * b + j);
    }
  }
#else
  for (int64_t b = 0; b < n_in / 32; ++b) {
    const float s = F16ToF32(blocks[b].d);
    for (int j = 0; j < 32; ++j) out[32 * b + j] = s * static_cast<float>(blocks[b].qs[j]);
  }
#endif
  ZeroTail(n_in, n_pad, out);
}

#if MNEMO_INT_DOT

using D16U8 = hn::Full128<uint8_t>;

/// How a weight type looks once unpacked (see the table at the top of this file).
struct IntFormat {
  int group = 0;           // G: elements per offset; 0: no offsets
  bool is_signed = false;  // w8 holds int8
};

/// Floats in the offset array of a row padded to n_pad elements.
inline int64_t OffsetLen(int64_t n_pad, int group) {
  return group == 0 ? 0 : (n_pad / group + 15) / 16 * 16;
}

/// Writes `v` to 8 consecutive floats (one 32-element block's dw entries).
HWY_INLINE void StoreScale8(float v, float* HWY_RESTRICT dst) {
  const hn::CappedTag<float, 8> d8;
  for (size_t j = 0; j < 8; j += hn::Lanes(d8)) hn::StoreU(hn::Set(d8, v), d8, dst + j);
}
/// Writes `v` to 4 consecutive floats (one 16-element sub-block's dw entries).
HWY_INLINE void StoreScale4(float v, float* HWY_RESTRICT dst) {
  const hn::Full128<float> d4;
  hn::StoreU(hn::Set(d4, v), d4, dst);
}

/// Zeroes the padding of an unpacked row: elements [n_in, n_pad), offsets [n_in/G, n_off).
HWY_INLINE void ZeroPad(int64_t n_in, int64_t n_pad, int group, int64_t n_off, uint8_t* w8,
                        float* dw, float* cw) {
  if (n_pad > n_in) {
    std::memset(w8 + n_in, 0, n_pad - n_in);
    std::memset(dw + n_in / 4, 0, (n_pad - n_in) / 4 * sizeof(float));
  }
  if (group != 0 && n_off > n_in / group) {
    std::memset(cw + n_in / group, 0, (n_off - n_in / group) * sizeof(float));
  }
}

/// Low and high nibbles of 16 bytes: elements j and j + 16 of a 32-block.
HWY_INLINE void Nibbles(const uint8_t* HWY_RESTRICT qs, hn::Vec<D16U8>& lo, hn::Vec<D16U8>& hi) {
  const D16U8 d;
  const auto v = hn::LoadU(d, qs);
  const auto mask = hn::Set(d, 0x0F);
  lo = hn::And(v, mask);
  hi = hn::And(hn::ShiftRight<4>(v), mask);
}

/// The fifth bits of a Q5 block as bytes 0 or 0x10: bit i of qh is element i's.
HWY_INLINE void HighBits5(uint32_t qh, hn::Vec<D16U8>& lo, hn::Vec<D16U8>& hi) {
  const D16U8 d;
  alignas(16) static constexpr uint8_t kSelLo[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                     1, 1, 1, 1, 1, 1, 1, 1};
  alignas(16) static constexpr uint8_t kSelHi[16] = {2, 2, 2, 2, 2, 2, 2, 2,
                                                     3, 3, 3, 3, 3, 3, 3, 3};
  alignas(16) static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                                   1, 2, 4, 8, 16, 32, 64, 128};
  const hn::Full128<uint32_t> d32;
  const auto bytes = hn::BitCast(d, hn::Set(d32, qh));
  const auto bit = hn::Load(d, kBit);
  const auto v10 = hn::Set(d, 0x10);
  lo = hn::IfThenElseZero(hn::TestBit(hn::TableLookupBytes(bytes, hn::Load(d, kSelLo)), bit), v10);
  hi = hn::IfThenElseZero(hn::TestBit(hn::TableLookupBytes(bytes, hn::Load(d, kSelHi)), bit), v10);
}

// ---- 32-element block types ----------------------------------------------------------------

HWY_INLINE void UnpackQ4_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const block_q4_0* blocks = reinterpret_cast<const block_q4_0*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    hn::Vec<D16U8> lo, hi;
    Nibbles(blocks[b].qs, lo, hi);
    hn::StoreU(lo, d, w8 + 32 * b);
    hn::StoreU(hi, d, w8 + 32 * b + 16);
    const float s = F16ToF32(blocks[b].d);
    StoreScale8(s, dw + 8 * b);
    cw[b] = -8.0f * s;
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackQ4_1(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const block_q4_1* blocks = reinterpret_cast<const block_q4_1*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    hn::Vec<D16U8> lo, hi;
    Nibbles(blocks[b].qs, lo, hi);
    hn::StoreU(lo, d, w8 + 32 * b);
    hn::StoreU(hi, d, w8 + 32 * b + 16);
    StoreScale8(F16ToF32(blocks[b].d), dw + 8 * b);
    cw[b] = F16ToF32(blocks[b].m);
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackQ5_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const block_q5_0* blocks = reinterpret_cast<const block_q5_0*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    hn::Vec<D16U8> lo, hi, hlo, hhi;
    Nibbles(blocks[b].qs, lo, hi);
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, 4);
    HighBits5(qh, hlo, hhi);
    hn::StoreU(hn::Or(lo, hlo), d, w8 + 32 * b);
    hn::StoreU(hn::Or(hi, hhi), d, w8 + 32 * b + 16);
    const float s = F16ToF32(blocks[b].d);
    StoreScale8(s, dw + 8 * b);
    cw[b] = -16.0f * s;
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackQ5_1(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const block_q5_1* blocks = reinterpret_cast<const block_q5_1*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    hn::Vec<D16U8> lo, hi, hlo, hhi;
    Nibbles(blocks[b].qs, lo, hi);
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, 4);
    HighBits5(qh, hlo, hhi);
    hn::StoreU(hn::Or(lo, hlo), d, w8 + 32 * b);
    hn::StoreU(hn::Or(hi, hhi), d, w8 + 32 * b + 16);
    StoreScale8(F16ToF32(blocks[b].d), dw + 8 * b);
    cw[b] = F16ToF32(blocks[b].m);
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

/// Q8_0 and IQ4_NL are signed; with VNNI they are stored as u = q + 128 (x ^ 0x80).
inline constexpr IntFormat kSignedFormat = kVnni ? IntFormat{32, false} : IntFormat{0, true};

HWY_INLINE void UnpackQ8_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const auto flip = hn::Set(d, 0x80);
  const block_q8_0* blocks = reinterpret_cast<const block_q8_0*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    const uint8_t* qs = reinterpret_cast<const uint8_t*>(blocks[b].qs);
    auto v0 = hn::LoadU(d, qs);
    auto v1 = hn::LoadU(d, qs + 16);
    const float s = F16ToF32(blocks[b].d);
    if constexpr (kVnni) {
      v0 = hn::Xor(v0, flip);
      v1 = hn::Xor(v1, flip);
      cw[b] = -128.0f * s;
    }
    hn::StoreU(v0, d, w8 + 32 * b);
    hn::StoreU(v1, d, w8 + 32 * b + 16);
    StoreScale8(s, dw + 8 * b);
  }
  ZeroPad(n_in, n_pad, kSignedFormat.group, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackIQ4_NL(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                             uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                             float* HWY_RESTRICT cw) {
  const D16U8 d;
  // The 16 levels as bytes: int8 values, or value + 128 where VNNI wants unsigned bytes.
  alignas(16) uint8_t table[16];
  for (int i = 0; i < 16; ++i) {
    table[i] = static_cast<uint8_t>(kIq4nlValues[i] + (kVnni ? 128 : 0));
  }
  const auto tbl = hn::Load(d, table);
  const block_iq4_nl* blocks = reinterpret_cast<const block_iq4_nl*>(row);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    hn::Vec<D16U8> lo, hi;
    Nibbles(blocks[b].qs, lo, hi);
    hn::StoreU(hn::TableLookupBytes(tbl, lo), d, w8 + 32 * b);
    hn::StoreU(hn::TableLookupBytes(tbl, hi), d, w8 + 32 * b + 16);
    const float s = F16ToF32(blocks[b].d);
    StoreScale8(s, dw + 8 * b);
    if constexpr (kVnni) cw[b] = -128.0f * s;
  }
  ZeroPad(n_in, n_pad, kSignedFormat.group, n_off, w8, dw, cw);
}

// ---- K-quants (256-element super-blocks) -----------------------------------------------------

/// Six-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (layout: blocks.h).
HWY_INLINE void ScaleMinK4(const uint8_t* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

/// The GGUF super-block scales of row `row` (K-quants): for super-block b, d[b] and dmin[b]
/// (fp16 bits; dmin 0 for Q6_K), and per sub-block j the scale sc[b * 256 / S + j] and min m.
HWY_INLINE void KScales(GgmlType type, const uint8_t* row, int64_t n_in, uint16_t* d,
                        uint16_t* dmin, int8_t* sc, int8_t* m) {
  for (int64_t b = 0; b < n_in / 256; ++b) {
    if (type == GgmlType::Q6_K) {
      const auto* blk = reinterpret_cast<const block_q6_K*>(row) + b;
      d[b] = blk->d;
      dmin[b] = 0;
      for (int j = 0; j < 16; ++j) {
        sc[16 * b + j] = blk->scales[j];
        m[16 * b + j] = 0;
      }
    } else {
      const uint8_t* scales;
      if (type == GgmlType::Q4_K) {
        const auto* blk = reinterpret_cast<const block_q4_K*>(row) + b;
        d[b] = blk->d, dmin[b] = blk->dmin, scales = blk->scales;
      } else {
        const auto* blk = reinterpret_cast<const block_q5_K*>(row) + b;
        d[b] = blk->d, dmin[b] = blk->dmin, scales = blk->scales;
      }
      for (int j = 0; j < 8; ++j) {
        int s6, m6;
        ScaleMinK4(scales, j, s6, m6);
        sc[8 * b + j] = static_cast<int8_t>(s6);
        m[8 * b + j] = static_cast<int8_t>(m6);
      }
    }
  }
}

HWY_INLINE void UnpackQ4_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const auto mask = hn::Set(d, 0x0F);
  const block_q4_K* blocks = reinterpret_cast<const block_q4_K*>(row);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    const block_q4_K& blk = blocks[b];
    const float dd = F16ToF32(blk.d);
    const float dmin = F16ToF32(blk.dmin);
    uint8_t* out = w8 + kQK_K * b;
    for (int c = 0; c < 4; ++c) {  // 64 elements: low nibbles, then high nibbles of 32 bytes
      for (int h = 0; h < 2; ++h) {
        const auto v = hn::LoadU(d, blk.qs + 32 * c + 16 * h);
        hn::StoreU(hn::And(v, mask), d, out + 64 * c + 16 * h);
        hn::StoreU(hn::And(hn::ShiftRight<4>(v), mask), d, out + 64 * c + 32 + 16 * h);
      }
    }
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      ScaleMinK4(blk.scales, j, sc, m);
      StoreScale8(dd * static_cast<float>(sc), dw + 64 * b + 8 * j);
      cw[8 * b + j] = -dmin * static_cast<float>(m);
    }
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackQ5_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const auto mask = hn::Set(d, 0x0F);
  const auto v10 = hn::Set(d, 0x10);
  const block_q5_K* blocks = reinterpret_cast<const block_q5_K*>(row);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    const block_q5_K& blk = blocks[b];
    const float dd = F16ToF32(blk.d);
    const float dmin = F16ToF32(blk.dmin);
    uint8_t* out = w8 + kQK_K * b;
    for (int h = 0; h < 2; ++h) {
      const auto qh = hn::LoadU(d, blk.qh + 16 * h);  // bit j of qh[l]: element 32 j + l
      for (int c = 0; c < 4; ++c) {
        const auto v = hn::LoadU(d, blk.qs + 32 * c + 16 * h);
        const auto bit_lo = hn::Set(d, static_cast<uint8_t>(1u << (2 * c)));
        const auto bit_hi = hn::Set(d, static_cast<uint8_t>(1u << (2 * c + 1)));
        const auto lo = hn::Or(hn::And(v, mask), hn::IfThenElseZero(hn::TestBit(qh, bit_lo), v10));
        const auto hi = hn::Or(hn::And(hn::ShiftRight<4>(v), mask),
                               hn::IfThenElseZero(hn::TestBit(qh, bit_hi), v10));
        hn::StoreU(lo, d, out + 64 * c + 16 * h);
        hn::StoreU(hi, d, out + 64 * c + 32 + 16 * h);
      }
    }
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      ScaleMinK4(blk.scales, j, sc, m);
      StoreScale8(dd * static_cast<float>(sc), dw + 64 * b + 8 * j);
      cw[8 * b + j] = -dmin * static_cast<float>(m);
    }
  }
  ZeroPad(n_in, n_pad, 32, n_off, w8, dw, cw);
}

HWY_INLINE void UnpackQ6_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off,
                           uint8_t* HWY_RESTRICT w8, float* HWY_RESTRICT dw,
                           float* HWY_RESTRICT cw) {
  const D16U8 d;
  const auto m4 = hn::Set(d, 0x0F);
  const auto m3 = hn::Set(d, 0x03);
  const auto m30 = hn::Set(d, 0x30);
  const block_q6_K* blocks = reinterpret_cast<const block_q6_K*>(row);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    const block_q6_K& blk = blocks[b];
    uint8_t* out = w8 + kQK_K * b;
    for (int h = 0; h < 2; ++h) {  // 128 elements each
      for (int l = 0; l < 32; l += 16) {
        const auto a = hn::LoadU(d, blk.ql + 64 * h + l);
        const auto c = hn::LoadU(d, blk.ql + 64 * h + 32 + l);
        const auto q = hn::LoadU(d, blk.qh + 32 * h + l);
        uint8_t* o = out + 128 * h + l;
        hn::StoreU(hn::Or(hn::And(a, m4), hn::ShiftLeft<4>(hn::And(q, m3))), d, o);
        hn::StoreU(hn::Or(hn::And(c, m4), hn::And(hn::ShiftLeft<2>(q), m30)), d, o + 32);
        hn::StoreU(hn::Or(hn::ShiftRight<4>(a), hn::And(q, m30)), d, o + 64);
        hn::StoreU(hn::Or(hn::ShiftRight<4>(c), hn::And(hn::ShiftRight<2>(q), m30)), d, o + 96);
      }
    }
    const float dd = F16ToF32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const float s = dd * static_cast<float>(blk.scales[j]);
      StoreScale4(s, dw + 64 * b + 4 * j);
      cw[16 * b + j] = -32.0f * s;
    }
  }
  ZeroPad(n_in, n_pad, 16, n_off, w8, dw, cw);
}

/// Float values of an unpacked row: out[i] = dw[i/4] * u_i + cw[i/G] for i < n (n a multiple
/// of 16; every type's scale and offset are constant over aligned groups of 16).
template <bool kSigned>
HWY_INLINE void DequantUnpacked(const uint8_t* HWY_RESTRICT w8, const float* HWY_RESTRICT dw,
                                const float* HWY_RESTRICT cw, int group, int64_t n,
                                float* HWY_RESTRICT out) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  using T8 = std::conditional_t<kSigned, int8_t, uint8_t>;
  const hn::Rebind<T8, decltype(df)> d8;
  const size_t nf = hn::Lanes(df);
  for (int64_t g = 0; g < n; g += 16) {
    const auto scale = hn::Set(df, dw[g / 4]);
    const auto offset = hn::Set(df, group == 0 ? 0.0f : cw[g / group]);
    for (size_t j = 0; j < 16; j += nf) {
      const auto u = hn::ConvertTo(
          df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const T8*>(w8) + g + j)));
      hn::StoreU(hn::MulAdd(u, scale, offset), df, out + g + j);
    }
  }
}

#endif  // MNEMO_INT_DOT

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_QUANT_UNPACK_INL_H_
