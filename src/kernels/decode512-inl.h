// AVX-512 fast path for matrix-vector products (decoding: 1 or 2 tokens): each weight type's
// blocks are unpacked straight into registers (no scratch round trip) with byte/word permutes,
// then dotted with the quantized activations. Included once per Highway target by the
// per-type matmul units; the code exists only on the AVX3 and AVX3_DL targets (toggle guard
// below), elsewhere the generic path of matmul_core-inl.h runs.
//
// Hand intrinsics (isolated here, AVX-512 BW/VL/F16C only, plus VNNI through DotQuads): Highway
// 1.0.3 has no 16-bit two-table permute, masked byte loads or mask-from-bits ops, which are what
// let one instruction pick the quant bytes of two blocks out of their interleaved headers.
//
// A decoder turns a group of kElems elements of a row into kVecs vectors of 64 weight bytes in
// element order (u8, or int8 where the format is signed on targets without VNNI) and, per
// vector, the float scale of each 4-element lane (dw) and, for float offsets, the offset of
// each lane (cw). Offsets that are integer multiples of the scale (Q4_0: -8 d, Q5_0: -16 d,
// Q8_0 with VNNI: -128 d, Q6_K: -32 d sc) are folded into the integer dot instead: the dot
// starts from -k * (sum of the 4 activations of the lane), precomputed per token.

#if defined(MNEMO_KERNELS_DECODE512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_DECODE512_INL_H_
#undef MNEMO_KERNELS_DECODE512_INL_H_
#else
#define MNEMO_KERNELS_DECODE512_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/matmul-inl.h"
#include "kernels/simd-inl.h"
#include "quant/blocks.h"

#undef MNEMO_HAVE_FAST512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define MNEMO_HAVE_FAST512 1
#else
#define MNEMO_HAVE_FAST512 0
#endif

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if MNEMO_HAVE_FAST512
namespace fast512 {

/// How a decoder's offsets reach the result.
enum class Offset {
  kNone,   // no offset (signed weights without VNNI)
  kInt,    // offset = -kIntOffset * scale: folded into the integer dot
  kFloat,  // float offset per lane (cw), added as cw * (dx * lane sum of activations)
};

// ---- index tables (built at compile time) ---------------------------------------------------

/// Word indices that copy block 0's 8 qs words twice, then block 1's twice: the 512-bit result
/// holds [qs0, qs0, qs1, qs1] (16 bytes each), ready for low / high nibble extraction.
constexpr std::array<uint16_t, 32> TwoBlockNibbleIdx(int qs_word0, int qs_word1) {
  std::array<uint16_t, 32> a{};
  for (int j = 0; j < 32; ++j) {
    a[j] = static_cast<uint16_t>((j < 16 ? qs_word0 : qs_word1) + j % 8);
  }
  return a;
}

/// Word indices that gather the listed words into the first lanes (the rest repeat word 0).
constexpr std::array<uint16_t, 32> GatherWords(int w0, int w1, int w2, int w3) {
  std::array<uint16_t, 32> a{};
  a[0] = static_cast<uint16_t>(w0);
  a[1] = static_cast<uint16_t>(w1);
  a[2] = static_cast<uint16_t>(w2);
  a[3] = static_cast<uint16_t>(w3);
  return a;
}

/// Float lane indices [i0 x8, i1 x8]: a block's scale for each of its 8 lanes.
constexpr std::array<int32_t, 16> Expand8(int i0, int i1) {
  std::array<int32_t, 16> a{};
  for (int j = 0; j < 16; ++j) a[j] = j < 8 ? i0 : i1;
  return a;
}

/// Float lane indices [i x4, i+1 x4, i+2 x4, i+3 x4]: 16-element sub-block scales.
constexpr std::array<int32_t, 16> Expand4(int i0) {
  std::array<int32_t, 16> a{};
  for (int j = 0; j < 16; ++j) a[j] = i0 + j / 4;
  return a;
}

HWY_INLINE __m512i LoadIdx16(const std::array<uint16_t, 32>& a) {
  return _mm512_loadu_si512(a.data());
}
HWY_INLINE __m512i LoadIdx32(const std::array<int32_t, 16>& a) {
  return _mm512_loadu_si512(a.data());
}

/// [x0 x8, x1 x8] from floats 0, 1 of v, or [x2 x8, x3 x8] from floats 2, 3 (kHigh).
template <bool kHigh = false>
HWY_INLINE __m512 ExpandPair(__m128 v) {
  static constexpr std::array<int32_t, 16> kIdx = kHigh ? Expand8(2, 3) : Expand8(0, 1);
  return _mm512_permutexvar_ps(LoadIdx32(kIdx), _mm512_castps128_ps512(v));
}

/// Bytes [lo(qs0), hi(qs0), lo(qs1), hi(qs1)] of two Q4-style blocks, from the raw bytes.
HWY_INLINE __m512i Nibbles2(__m512i raw, __m512i nib_idx) {
  const __m512i q = _mm512_permutexvar_epi16(nib_idx, raw);
  const __m512i shifted = _mm512_mask_srli_epi16(q, 0xFF00FF00u, q, 4);  // 128-bit lanes 1, 3
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

/// Two consecutive fp16 words at p -> floats in lanes 0, 1.
HWY_INLINE __m128 TwoHalves(const uint8_t* p0, const uint8_t* p1) {
  uint16_t h0, h1;
  std::memcpy(&h0, p0, 2);
  std::memcpy(&h1, p1, 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16))));
}

// ---- decoders: 32-element block types, two blocks (64 elements) per group ---------------------

struct DecQ4_0 {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 8;
  static constexpr Offset kOffset = Offset::kInt;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512*) const {
    static constexpr std::array<uint16_t, 32> kNib = TwoBlockNibbleIdx(1, 10);
    const uint8_t* p = row + 36 * g;
    w[0] = Nibbles2(_mm512_maskz_loadu_epi8((1ull << 36) - 1, p), LoadIdx16(kNib));
    dw[0] = ExpandPair(TwoHalves(p, p + 18));
  }
};

struct DecIQ4_NL {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 128;
  static constexpr Offset kOffset = kVnni ? Offset::kInt : Offset::kNone;
  static constexpr bool kSigned = !kVnni;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512*) const {
    static constexpr std::array<uint16_t, 32> kNib = TwoBlockNibbleIdx(1, 10);
    const uint8_t* p = row + 36 * g;
    const __m512i nib = Nibbles2(_mm512_maskz_loadu_epi8((1ull << 36) - 1, p), LoadIdx16(kNib));
    static constexpr std::array<int8_t, 16> kTable = [] {
      std::array<int8_t, 16> t{};
      for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(kIq4nlValues[i] + (kVnni ? 128 : 0));
      return t;
    }();
    const __m512i tbl =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kTable.data())));
    w[0] = _mm512_shuffle_epi8(tbl, nib);
    dw[0] = ExpandPair(TwoHalves(p, p + 18));
  }
};

struct DecQ4_1 {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512* cw) const {
    static constexpr std::array<uint16_t, 32> kNib = TwoBlockNibbleIdx(2, 12);
    static constexpr std::array<uint16_t, 32> kDm = GatherWords(0, 10, 1, 11);  // d0 d1 m0 m1
    const uint8_t* p = row + 40 * g;
    const __m512i raw = _mm512_maskz_loadu_epi8((1ull << 40) - 1, p);
    w[0] = Nibbles2(raw, LoadIdx16(kNib));
    const __m128 dm =
        _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(LoadIdx16(kDm), raw)));
    dw[0] = ExpandPair(dm);
    cw[0] = ExpandPair<true>(dm);
  }
};

/// ORs 0x10 into the bytes whose bit is set in the two blocks' 32-bit qh words.
HWY_INLINE __m512i AddHighBits(__m512i w, __m512i raw, __m512i qh_idx) {
  const uint64_t bits = static_cast<uint64_t>(
      _mm_cvtsi128_si64(_mm512_castsi512_si128(_mm512_permutexvar_epi16(qh_idx, raw))));
  return _mm512_mask_add_epi8(w, static_cast<__mmask64>(bits), w, _mm512_set1_epi8(0x10));
}

struct DecQ5_0 {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 16;
  static constexpr Offset kOffset = Offset::kInt;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512*) const {
    static constexpr std::array<uint16_t, 32> kNib = TwoBlockNibbleIdx(3, 14);
    static constexpr std::array<uint16_t, 32> kQh = GatherWords(1, 2, 12, 13);
    const uint8_t* p = row + 44 * g;
    const __m512i raw = _mm512_maskz_loadu_epi8((1ull << 44) - 1, p);
    w[0] = AddHighBits(Nibbles2(raw, LoadIdx16(kNib)), raw, LoadIdx16(kQh));
    dw[0] = ExpandPair(TwoHalves(p, p + 22));
  }
};

struct DecQ5_1 {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512* cw) const {
    static constexpr std::array<uint16_t, 32> kNib = TwoBlockNibbleIdx(4, 16);
    static constexpr std::array<uint16_t, 32> kQh = GatherWords(2, 3, 14, 15);
    static constexpr std::array<uint16_t, 32> kDm = GatherWords(0, 12, 1, 13);
    const uint8_t* p = row + 48 * g;
    const __m512i raw = _mm512_maskz_loadu_epi8((1ull << 48) - 1, p);
    w[0] = AddHighBits(Nibbles2(raw, LoadIdx16(kNib)), raw, LoadIdx16(kQh));
    const __m128 dm =
        _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(LoadIdx16(kDm), raw)));
    dw[0] = ExpandPair(dm);
    cw[0] = ExpandPair<true>(dm);
  }
};

struct DecQ8_0 {
  static constexpr int kElems = 64, kVecs = 1, kIntOffset = 128;
  static constexpr Offset kOffset = kVnni ? Offset::kInt : Offset::kNone;
  static constexpr bool kSigned = !kVnni;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512*) const {
    const uint8_t* p = row + 68 * g;
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36));
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    if constexpr (kVnni) v = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
    w[0] = v;
    dw[0] = ExpandPair(TwoHalves(p, p + 34));
  }
};

// ---- decoders: K-quants, one 256-element super-block (4 vectors) per group --------------------

/// The 8 six-bit scales and mins of a Q4_K / Q5_K super-block (layout: blocks.h), as
/// d * sc_j in lanes 0..7 and -dmin * m_j in lanes 8..15.
HWY_INLINE __m512 ScalesMinsK4(const uint8_t* blk) {
  uint32_t s[3];
  std::memcpy(s, blk + 4, 12);
  const uint32_t sc_lo = s[0] & 0x3F3F3F3Fu;
  const uint32_t m_lo = s[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (s[2] & 0x0F0F0F0Fu) | ((s[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((s[2] >> 4) & 0x0F0F0F0Fu) | ((s[1] >> 2) & 0x30303030u);
  const __m128i bytes = _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo),
                                      static_cast<int>(sc_hi), static_cast<int>(sc_lo));
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
  uint16_t dh[2];
  std::memcpy(dh, blk, 4);
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dh[0] | (dh[1] << 16))));
  const __m512 mult =
      _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_mm_cvtss_f32(dd)),
                           _mm512_set1_ps(-_mm_cvtss_f32(_mm_shuffle_ps(dd, dd, 1))));
  return _mm512_mul_ps(v, mult);
}

HWY_INLINE void ExpandK4(__m512 sm, __m512* dw, __m512* cw) {
  static constexpr std::array<int32_t, 16> kIdx[8] = {
      Expand8(0, 1), Expand8(2, 3),   Expand8(4, 5),   Expand8(6, 7),
      Expand8(8, 9), Expand8(10, 11), Expand8(12, 13), Expand8(14, 15)};
  for (int c = 0; c < 4; ++c) {
    dw[c] = _mm512_permutexvar_ps(LoadIdx32(kIdx[c]), sm);
    cw[c] = _mm512_permutexvar_ps(LoadIdx32(kIdx[4 + c]), sm);
  }
}

struct DecQ4_K {
  static constexpr int kElems = 256, kVecs = 4, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512* cw) const {
    const uint8_t* p = row + sizeof(block_q4_K) * g;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * c));
      const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      w[c] = _mm512_and_si512(v, m4);
    }
    ExpandK4(ScalesMinsK4(p), dw, cw);
  }
};

struct DecQ5_K {
  static constexpr int kElems = 256, kVecs = 4, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512* cw) const {
    const uint8_t* p = row + sizeof(block_q5_K) * g;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v10 = _mm512_set1_epi8(0x10);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48 + 32 * c));
      const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      const __mmask32 lo =
          _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c))));
      const __mmask32 hi =
          _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))));
      const __mmask64 bits =
          _mm512_kunpackd(static_cast<__mmask64>(hi), static_cast<__mmask64>(lo));
      w[c] = _mm512_mask_add_epi8(_mm512_and_si512(v, m4), bits, _mm512_and_si512(v, m4), v10);
    }
    ExpandK4(ScalesMinsK4(p), dw, cw);
  }
};

struct DecQ6_K {
  static constexpr int kElems = 256, kVecs = 4, kIntOffset = 32;
  static constexpr Offset kOffset = Offset::kInt;
  static constexpr bool kSigned = false;
  HWY_INLINE void Load(const uint8_t* row, int64_t g, __m512i* w, __m512* dw, __m512*) const {
    const uint8_t* p = row + sizeof(block_q6_K) * g;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    // 16-bit shift counts: lower 256 bits / upper 256 bits.
    const __m512i shl_42 =
        _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i shr_02 =
        _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      w[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                 _mm512_and_si512(_mm512_sllv_epi16(qh, shl_42), m30));
      w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                     _mm512_and_si512(_mm512_srlv_epi16(qh, shr_02), m30));
    }
    uint16_t dh;
    std::memcpy(&dh, p + 208, 2);
    const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(p + 192)))),
                                    _mm512_set1_ps(_cvtsh_ss(dh)));
    static constexpr std::array<int32_t, 16> kIdx[4] = {Expand4(0), Expand4(4), Expand4(8),
                                                        Expand4(12)};
    for (int k = 0; k < 4; ++k) dw[k] = _mm512_permutexvar_ps(LoadIdx32(kIdx[k]), sc);
  }
};

// ---- the fused matrix-vector kernel ----------------------------------------------------------

/// kR rows x kC tokens: y[c * y_stride + r] for r < n_rows. Rows past n_rows repeat the last.
template <class Dec, int kR, int kC>
MNEMO_VNNI_ATTR HWY_NOINLINE void GemvTile(const uint8_t* const* rows, int n_rows, int64_t n_in,
                                           const int8_t* const* q, const float* const* dx,
                                           const float* const* aux, float* y, int64_t y_stride) {
  // Loops over r / c / v are unrolled (pragmas) so that acc and w stay in registers.
  const Dec dec;
  __m512 acc[kR][kC];
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < kC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const DU8 du8;
  const DI8 di8;
  const DI32 di32;
  for (int64_t g = 0; g < n_in / Dec::kElems; ++g) {
    __m512i w[kR][Dec::kVecs];
    __m512 dw[kR][Dec::kVecs];
    __m512 cw[kR][Dec::kVecs];
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) dec.Load(rows[r], g, w[r], dw[r], cw[r]);
#pragma GCC unroll 4
    for (int v = 0; v < Dec::kVecs; ++v) {
      const int64_t e = g * Dec::kElems + 64 * v;
#pragma GCC unroll 4
      for (int c = 0; c < kC; ++c) {
        const hn::Vec<DI8> a{_mm512_loadu_si512(q[c] + e)};
        const __m512 dxv = _mm512_loadu_ps(dx[c] + e / 4);
        __m512 auxv = _mm512_setzero_ps();
        if constexpr (Dec::kOffset != Offset::kNone) auxv = _mm512_loadu_ps(aux[c] + e / 4);
#pragma GCC unroll 4
        for (int r = 0; r < kR; ++r) {
          __m512i dot;
          if constexpr (Dec::kOffset == Offset::kInt && kVnni) {
#if HWY_TARGET == HWY_AVX3_DL
            dot = _mm512_dpbusd_epi32(_mm512_castps_si512(auxv), w[r][v], a.raw);
#endif
          } else {
            dot = DotQuads<Dec::kSigned>(hn::Vec<DU8>{w[r][v]}, a).raw;
            if constexpr (Dec::kOffset == Offset::kInt) {
              dot = _mm512_add_epi32(dot, _mm512_castps_si512(auxv));
            }
          }
          (void)di32;
          (void)du8;
          (void)di8;
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r][v], dxv), acc[r][c]);
          if constexpr (Dec::kOffset == Offset::kFloat) {
            acc[r][c] = _mm512_fmadd_ps(cw[r][v], auxv, acc[r][c]);
          }
        }
      }
    }
  }
  const DF32 df;
#pragma GCC unroll 4
  for (int c = 0; c < kC; ++c) {
    if constexpr (kR == 4) {
      if (n_rows == 4) {
        Reduce4(df, hn::Vec<DF32>{acc[0][c]}, hn::Vec<DF32>{acc[1][c]}, hn::Vec<DF32>{acc[2][c]},
                hn::Vec<DF32>{acc[3][c]}, y + c * y_stride);
        continue;
      }
    }
    for (int r = 0; r < n_rows; ++r) y[c * y_stride + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

/// Most tokens per fused call: the accumulators and unpacked weights of kR rows x kC tokens
/// must fit the 32 vector registers (K-quant groups are 4 vectors per row).
template <class Dec>
inline constexpr int kFusedMaxTokens = Dec::kVecs == 1 ? 4 : 2;

/// Whether the fused path takes this call: few tokens and whole groups.
template <class Dec>
HWY_INLINE bool FusedApplies(const internal::MatmulArgs& a) {
  return a.n_tokens <= kFusedMaxTokens<Dec> && a.n_in % Dec::kElems == 0;
}

/// The fused matmul: quantize x (with the per-lane auxiliary sums), then rows in tasks.
template <class Dec>
void MatmulFused(const internal::MatmulArgs& a) {
  using internal::ceil_div;
  using internal::round_up;
  constexpr int kR = Dec::kVecs == 1 ? 4 : 2;
  const int64_t n_pad = round_up(a.n_in, internal::kPadElems);
  const int64_t n_tokens = a.n_tokens;
  uint8_t* call = static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(n_tokens * (n_pad + 2 * n_pad) + 3 * 64));
  int8_t* q = reinterpret_cast<int8_t*>(call);
  float* dx = reinterpret_cast<float*>(call + round_up(n_tokens * n_pad, 64));
  float* aux = dx + n_tokens * n_pad / 4;
  const int aux_mode = Dec::kOffset == Offset::kInt     ? Dec::kIntOffset
                       : Dec::kOffset == Offset::kFloat ? -1
                                                        : 0;
  QuantizeRowsAux(a.x, a.x_stride, n_tokens, a.n_in, n_pad, aux_mode, q, dx, aux);

  const int n_threads = internal::n_threads_of(a.pool);
  const int64_t rows_per_task = std::max<int64_t>(
      2 * kR, round_up(ceil_div(a.n_out, 8 * static_cast<int64_t>(n_threads)), kR));
  internal::parallel_for(a.pool, ceil_div(a.n_out, rows_per_task), [&](int64_t task, int) {
    const int64_t r0 = task * rows_per_task;
    const int64_t r1 = std::min(a.n_out, r0 + rows_per_task);
    const int8_t* qp[4];
    const float* dxp[4];
    const float* auxp[4];
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t tt = std::min(t, n_tokens - 1);
      qp[t] = q + tt * n_pad;
      dxp[t] = dx + tt * n_pad / 4;
      auxp[t] = aux + tt * n_pad / 4;
    }
    for (int64_t r = r0; r < r1; r += kR) {
      const int n = static_cast<int>(std::min<int64_t>(kR, r1 - r));
      const uint8_t* rows[kR];
      for (int i = 0; i < kR; ++i) rows[i] = a.w + std::min<int64_t>(r + i, r1 - 1) * a.w_row_bytes;
      float* y = a.y + r;
      switch (n_tokens) {
        case 1:
          GemvTile<Dec, kR, 1>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
        case 2:
          GemvTile<Dec, kR, 2>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
        default:
          if constexpr (kFusedMaxTokens<Dec> >= 4) {
            if (n_tokens == 3) {
              GemvTile<Dec, kR, 3>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
            } else {
              GemvTile<Dec, kR, 4>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
            }
          }
      }
    }
  });
}

}  // namespace fast512
#endif  // MNEMO_HAVE_FAST512

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_DECODE512_INL_H_
