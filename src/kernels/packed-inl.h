// Packed weights (kernels.h PackedMatrix): the row-interleaved layout, its packer and its
// matmul, per Highway target. Included (through foreach_target.h) only by packed.cc; toggle
// guard below. The kernels exist on AVX3_DL (VNNI) only; elsewhere nothing is packed and the
// public matmul reads the GGUF source.
//
// Layout of one group of 16 rows (rows past n_out are zero, their outputs dropped), for a row
// length of n_sub sub-blocks of S elements (S = 32; 16 for Q6_K), in spans (PackedLayout):
//   fp16 scales, one span: [quants of sub-block 0] ... [quants of sub-block n_sub-1] [scales]
//                          [offsets]
//   K-quants, a span per 256 elements: [super] [scales] [offsets] (padding to 64 bytes)
//                          [quants of its 256 / S sub-blocks]
// so that a decode reads each group as one stream, every span's scales ahead of its quants.
// quants of one sub-block, in 64-byte units whose 32-bit lane r holds 4 consecutive elements of
// row r (so one dpbusd against 4 activations broadcast to every lane accumulates 16 rows):
//   U8: S/4 units; unit k = elements 4k..4k+3 as bytes u (int8 formats stored as q + 128).
//   U4: S/8 units; unit j holds elements 8j..8j+3 in the low nibbles and 8j+4..8j+7 in the
//       high nibbles of the same bytes.
//   U5: the U4 units, then S/4 64-bit masks: bit 4r+i of mask k = bit 4 of element 4k+i of
//       row r (the fifth bits).
//   U6 (Q6_K, S = 16): the U4 units of the low four bits, then 64 bytes of high bit pairs:
//       byte 4r+i, bits 2(2j+h) and 2(2j+h)+1 = bits 4 and 5 of element 8j+4h+i of row r.
// scales: per sub-block the 16 rows' scales d as fp16 (the GGUF's scale, exact), or for
// K-quants their 8-bit sub-block scales sc (int8; Q4_K / Q5_K's 6-bit values fit); offsets
// (only "float offset" formats): per sub-block 16 fp16 offsets c, or the K-quants' 8-bit mins m.
// super (K-quants only): per 256 elements the 16 rows' fp16 super-block scales D, then as many
// fp16 super-block mins M (Q4_K / Q5_K). A K-quant's d = D sc and c = -M m: products exact in
// f32, the values the unpacked form holds. So every type is within 3% of its GGUF rows' size.
// Element = d * u + c, or d * (u - k) for "integer offset" formats (c = -k d).
// The activations are quantized as for the unpacked path (8 bits, one scale per 32); per
// sub-block the kernel needs dx (the scale) and sx = dx * sum(q) (times -k for integer offsets).

#if defined(MNEMO_KERNELS_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_PACKED_INL_H_
#undef MNEMO_KERNELS_PACKED_INL_H_
#else
#define MNEMO_KERNELS_PACKED_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/matmul-inl.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL

namespace packed {

using internal::PackedFormat;
using internal::PackedLayout;

/// Unit j of a U4 / U5 / U6 sub-block's quants q, widened to bytes: elements 8j..8j+3 (lo) and
/// 8j+4..8j+7 (hi) of the 16 rows.
template <int kKind, int kS>
HWY_INLINE void WidenUnit(const uint8_t* q, int j, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_load_si512(q + 64 * j);
  lo = _mm512_and_si512(v, m4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  if constexpr (kKind == internal::kPackU5) {
    const __m512i v10 = _mm512_set1_epi8(0x10);
    uint64_t mlo, mhi;
    std::memcpy(&mlo, q + 8 * kS + 16 * j, 8);
    std::memcpy(&mhi, q + 8 * kS + 16 * j + 8, 8);
    lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(mlo), lo, v10);
    hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(mhi), hi, v10);
  } else if constexpr (kKind == internal::kPackU6) {
    static_assert(kS == 16, "U6 has two units");
    // Pair k = 2j + h sits at bits 2k, 2k+1; moved to bits 4, 5. (a & b) | c is ternlog 0xEA.
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i h = _mm512_load_si512(q + 8 * kS);
    const __m512i p_lo = j == 0 ? _mm512_slli_epi16(h, 4) : h;
    const __m512i p_hi = j == 0 ? _mm512_slli_epi16(h, 2) : _mm512_srli_epi16(h, 2);
    lo = _mm512_ternarylogic_epi32(p_lo, m30, lo, 0xEA);
    hi = _mm512_ternarylogic_epi32(p_hi, m30, hi, 0xEA);
  }
}

/// Where sub-block s of a group lies: its span and its index k in the span.
template <int kS, bool kF16>
HWY_INLINE const uint8_t* SpanOf(const uint8_t* group, const PackedLayout& L, int64_t s,
                                 int64_t& k) {
  if constexpr (kF16) {  // one span
    k = s;
    return group;
  } else {
    constexpr int64_t kPerSpan = 256 / kS;
    k = s % kPerSpan;
    return group + (s / kPerSpan) * L.span_bytes;
  }
}

/// The 16 rows' scale d and offset c (zero unless kOff < 0) of sub-block k of a span.
template <int kS, bool kF16, int kOff>
HWY_INLINE void SubScales(const uint8_t* span, const PackedLayout& L, int64_t k, __m512& d,
                          __m512& off) {
  off = _mm512_setzero_ps();
  if constexpr (kF16) {
    d = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(span + L.scales_offset + 32 * k)));
    if constexpr (kOff < 0) {
      off = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(span + L.offsets_offset + 32 * k)));
    }
  } else {  // d = D sc, c = -M m (exact products)
    const uint8_t* super = span + L.super_offset;
    const __m512 dsup = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(super)));
    const __m128i sc =
        _mm_load_si128(reinterpret_cast<const __m128i*>(span + L.scales_offset + 16 * k));
    d = _mm512_mul_ps(dsup, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
    if constexpr (kOff < 0) {
      const __m512 msup =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(super + 32)));
      const __m128i m =
          _mm_load_si128(reinterpret_cast<const __m128i*>(span + L.offsets_offset + 16 * k));
      off = _mm512_mul_ps(_mm512_xor_ps(msup, _mm512_set1_ps(-0.0f)),
                          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m)));
    }
  }
}

/// How far ahead of the sub-block being read Tile() prefetches, in bytes: into L1 (T0) at
/// kPrefetchL1 and into L2 (T2) at internal::g_far_prefetch_bytes (which depends on the CPU
/// kind; 4 KiB on the Xeon measured here). One core's reads are bound by how many lines it
/// has in flight, not by the memory: the far T2 prefetches keep about 64 lines on their way to
/// L2 without holding L1's few fill buffers, the near T0 ones bring them on to L1. Measured
/// (`kernels_bench` BM_MatmulStream, Xeon with AMX, 2 threads) against one T0 prefetch 2 KiB
/// ahead: q4_K 1536 x 1536 22.4 -> 25.6 GB/s, 17920 x 1536 24.0 -> 27.6; q6_K 25.5 -> 29.0 and
/// 26.2 -> 31.0, beside a plain read of 32 GB/s. T1 for the far ones: 4-6% less; T2 at 3, 5, 6
/// or 8 KiB: less; NTA: half.
inline constexpr int64_t kPrefetchL1 = 1024;

/// Software prefetch of sub-block k of a span (the hardware prefetchers stop at 4 KiB pages;
/// decoding streams each group from memory once), kPrefetchL1 and far bytes ahead. A
/// K-quant group is one stream of spans (scales, then their quants), walked in equal steps of
/// span_bytes / subs_per_span per sub-block so that no line of it is skipped.
template <int kS, bool kF16>
HWY_INLINE void PrefetchAhead(const uint8_t* span, const PackedLayout& L, int64_t k, int64_t far) {
  const int64_t step = kF16 ? L.sub_quant_bytes : L.span_bytes / (256 / kS);
  const char* p = reinterpret_cast<const char*>(span) + k * step;
  for (int64_t b = 0; b < step; b += 64) {
    _mm_prefetch(p + kPrefetchL1 + b, _MM_HINT_T0);
    _mm_prefetch(p + far + b, _MM_HINT_T2);
  }
  if (step % 64 != 0) {
    _mm_prefetch(p + kPrefetchL1 + step - 1, _MM_HINT_T0);
    _mm_prefetch(p + far + step - 1, _MM_HINT_T2);
  }
}

/// One 16-row group: y[c * y_stride + r] for r < n_valid, tokens c < kC.
template <int kKind, int kS, bool kF16, int kOff, int kC>
MNEMO_VNNI_ATTR HWY_NOINLINE void Tile(const uint8_t* group, const PackedLayout& L,
                                       const int8_t* const* a, const float* const* dx,
                                       const float* const* sx, float* y, int64_t y_stride,
                                       int n_valid) {
  __m512 accf[kC];
  for (int c = 0; c < kC; ++c) accf[c] = _mm512_setzero_ps();
  const int64_t far = internal::g_far_prefetch_bytes;
  for (int64_t s = 0; s < L.n_sub; ++s) {
    int64_t k;
    const uint8_t* span = SpanOf<kS, kF16>(group, L, s, k);
    const uint8_t* q = span + L.quants_offset + k * L.sub_quant_bytes;
    const int64_t e0 = s * kS;
    PrefetchAhead<kS, kF16>(span, L, k, far);
    __m512i acci[kC];
    for (int c = 0; c < kC; ++c) acci[c] = _mm512_setzero_si512();
    if constexpr (kKind == internal::kPackU8) {
      for (int k = 0; k < kS / 4; ++k) {
        const __m512i v = _mm512_load_si512(q + 64 * k);
        for (int c = 0; c < kC; ++c) {
          int32_t a4;
          std::memcpy(&a4, a[c] + e0 + 4 * k, 4);
          acci[c] = _mm512_dpbusd_epi32(acci[c], v, _mm512_set1_epi32(a4));
        }
      }
    } else {
      for (int j = 0; j < kS / 8; ++j) {
        __m512i lo, hi;
        WidenUnit<kKind, kS>(q, j, lo, hi);
        for (int c = 0; c < kC; ++c) {
          int32_t a_lo, a_hi;
          std::memcpy(&a_lo, a[c] + e0 + 8 * j, 4);
          std::memcpy(&a_hi, a[c] + e0 + 8 * j + 4, 4);
          acci[c] = _mm512_dpbusd_epi32(acci[c], lo, _mm512_set1_epi32(a_lo));
          acci[c] = _mm512_dpbusd_epi32(acci[c], hi, _mm512_set1_epi32(a_hi));
        }
      }
    }
    __m512 d, off;
    SubScales<kS, kF16, kOff>(span, L, k, d, off);
    for (int c = 0; c < kC; ++c) {
      const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(dx[c][e0 / 4]));
      accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[c]), scale, accf[c]);
      if constexpr (kOff > 0) {  // c = -k d: sx was multiplied by -k
        accf[c] = _mm512_fmadd_ps(d, _mm512_set1_ps(sx[c][s]), accf[c]);
      } else if constexpr (kOff < 0) {
        accf[c] = _mm512_fmadd_ps(off, _mm512_set1_ps(sx[c][s]), accf[c]);
      }
    }
  }
  const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1);
  for (int c = 0; c < kC; ++c) _mm512_mask_storeu_ps(y + c * y_stride, valid, accf[c]);
}

using TileColsFn = void (*)(const uint8_t*, const PackedLayout&, const int8_t* const*,
                            const float* const*, const float* const*, float*, int64_t, int);

template <int kKind, int kS, bool kF16, int kOff, int... kI>
constexpr std::array<TileColsFn, sizeof...(kI)> TileTable(std::integer_sequence<int, kI...>) {
  return {&Tile<kKind, kS, kF16, kOff, kI + 1>...};
}

/// A format's tile for n_cols tokens, 1 <= n_cols <= 8 (one tile per width).
template <int kKind, int kS, bool kF16, int kOff>
void TileCols(int n_cols, const uint8_t* group, const PackedLayout& L, const int8_t* const* a,
              const float* const* dx, const float* const* sx, float* y, int64_t y_stride,
              int n_valid) {
  static constexpr std::array<TileColsFn, 8> kTable =
      TileTable<kKind, kS, kF16, kOff>(std::make_integer_sequence<int, 8>{});
  CHECK(n_cols >= 1 && n_cols <= 8) << "bad packed tile width " << n_cols;
  kTable[n_cols - 1](group, L, a, dx, sx, y, y_stride, n_valid);
}

using TileFn = void (*)(int, const uint8_t*, const PackedLayout&, const int8_t* const*,
                        const float* const*, const float* const*, float*, int64_t, int);

inline TileFn GetTile(PackedFormat f) {
  using internal::kPackU4;
  using internal::kPackU5;
  using internal::kPackU8;
  switch (f) {
    case PackedFormat::kQ4_0:
      return &TileCols<kPackU4, 32, true, 8>;
    case PackedFormat::kQ4_1:
      return &TileCols<kPackU4, 32, true, -1>;
    case PackedFormat::kQ5_0:
      return &TileCols<kPackU5, 32, true, 16>;
    case PackedFormat::kQ5_1:
      return &TileCols<kPackU5, 32, true, -1>;
    case PackedFormat::kQ8_0:
      return &TileCols<kPackU8, 32, true, 128>;
    case PackedFormat::kIQ4_NL:
      return &TileCols<kPackU8, 32, true, 128>;
    case PackedFormat::kQ4_K:
      return &TileCols<kPackU4, 32, false, -1>;
    case PackedFormat::kQ5_K:
      return &TileCols<kPackU5, 32, false, -1>;
    case PackedFormat::kQ6_K:
      return &TileCols<internal::kPackU6, 16, false, 32>;
    default:
      return nullptr;
  }
}

// ---- AMX tiles for prompts (CPUs with AMX-INT8, e.g. Xeon Sapphire Rapids and later) --------
// TDPBSUD multiplies a tile of signed bytes (16 tokens x K activations, from the quantized
// rows copied into tile order) by a tile of unsigned bytes in exactly the packed U8 layout (K/4
// units of 16 rows x 4 elements; U4 / U5 / U6 widened to it), giving the int32 dots of 16
// tokens x 16 rows for one sub-block in one instruction. The scales are then applied per token
// row of the result, as in Tile().

/// The 64-byte tile configuration (palette 1): tile 0 = C (16 x 16 int32), tile 1 = A (16
/// tokens x kS bytes), tile 2 = B (kS / 4 rows x 64 bytes); tiles 3, 4, 5 the same, so that one
/// sub-block's product runs while the previous one's result is scaled.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The AMX functions name the whole target (HWY_TARGET_STR) plus the AMX features: clang lets a
// function's own target attribute replace the one HWY_BEFORE_NAMESPACE pushes (simd-inl.h).
template <int kS>
__attribute__((target(HWY_TARGET_STR ",amx-tile"))) HWY_NOINLINE void AmxConfigure() {
  TileConfig cfg;
  for (int p = 0; p < 6; p += 3) {  // two sets: C, A, B = tiles 0, 1, 2 and 3, 4, 5
    cfg.rows[p] = 16;
    cfg.colsb[p] = 64;
    cfg.rows[p + 1] = 16;
    cfg.colsb[p + 1] = kS;
    cfg.rows[p + 2] = kS / 4;
    cfg.colsb[p + 2] = 64;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 bytes of the configuration;
  // the barrier keeps the stores to the other 56 bytes.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

template <int kUnused>
__attribute__((target(HWY_TARGET_STR ",amx-tile"))) HWY_NOINLINE void AmxRelease() {
  _tile_release();
}

/// AmxGroup's last block, when it holds at most this many tokens, runs on the VNNI units
/// (AmxRemainder): a tile product costs as much for 1 token as for 16.
inline constexpr int kAmxRemainderVnni = 8;

/// One token row of AmxEpilogue: acc + the row's dots c32 times d dx, plus the offset term.
template <int kOff>
HWY_INLINE __m512 AmxEpilogueRow(const int32_t* c32, __m512 d, __m512 off, float dx, float sx,
                                 __m512 acc) {
  const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(c32));
  acc = _mm512_fmadd_ps(c, _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc);
  if constexpr (kOff > 0) {
    acc = _mm512_fmadd_ps(d, _mm512_set1_ps(sx), acc);
  } else if constexpr (kOff < 0) {
    acc = _mm512_fmadd_ps(off, _mm512_set1_ps(sx), acc);
  }
  return acc;
}

/// acc[m] (token row m of a 16 x 16 tile) += sub-block s's int32 dots cbuf[m][0..16), scaled as
/// Tile() scales them (the same operations, so the same bits), for m < n_tok (the rows past it
/// are padding of the last block and are left alone). dx / sx: token row 0's scale and sum of
/// the sub-block, rows dx_stride / sx_stride apart.
template <int kS, bool kF16, int kOff>
HWY_INLINE void AmxEpilogue(const int32_t* cbuf, const uint8_t* group, const PackedLayout& L,
                            int64_t s, const float* dx, int64_t dx_stride, const float* sx,
                            int64_t sx_stride, int n_tok, __m512 (&acc)[16]) {
  __m512 d, off;
  int64_t k;
  const uint8_t* span = SpanOf<kS, kF16>(group, L, s, k);
  SubScales<kS, kF16, kOff>(span, L, k, d, off);
  // Rows by constant index, written out, so that acc stays in registers; the test on n_tok
  // (always true but in the last block) is predicted.
#define MNEMO_AMX_ROW(M) \
  if ((M) < n_tok)       \
  acc[M] =               \
      AmxEpilogueRow<kOff>(cbuf + 16 * (M), d, off, dx[(M)*dx_stride], sx[(M)*sx_stride], acc[M])
  MNEMO_AMX_ROW(0);
  MNEMO_AMX_ROW(1);
  MNEMO_AMX_ROW(2);
  MNEMO_AMX_ROW(3);
  MNEMO_AMX_ROW(4);
  MNEMO_AMX_ROW(5);
  MNEMO_AMX_ROW(6);
  MNEMO_AMX_ROW(7);
  MNEMO_AMX_ROW(8);
  MNEMO_AMX_ROW(9);
  MNEMO_AMX_ROW(10);
  MNEMO_AMX_ROW(11);
  MNEMO_AMX_ROW(12);
  MNEMO_AMX_ROW(13);
  MNEMO_AMX_ROW(14);
  MNEMO_AMX_ROW(15);
#undef MNEMO_AMX_ROW
}

/// Tokens t, t + 1, ... t + kT - 1 of AmxGroup's last, partial block, on the VNNI units instead of
/// a tile product that would be mostly padding: the same int32 dots of each sub-block (exact
/// integer sums, so equal to the tile's), from the same widened B rows (kS / 4 rows of 16
/// output rows x 4 bytes), then AmxEpilogueRow's operations. y rows as in AmxGroup.
template <int kT, int kS, bool kF16, int kOff>
MNEMO_VNNI_ATTR HWY_NOINLINE void AmxRemainder(const uint8_t* b, int64_t b_stride,
                                               const uint8_t* group, const PackedLayout& L,
                                               const QuantRows& qr, int64_t t, float* y,
                                               int64_t y_stride, __mmask16 valid) {
  const int64_t dx_stride = qr.n_pad / 4;
  __m512 acc[kT];
#pragma GCC unroll 8
  for (int j = 0; j < kT; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t s = 0; s < L.n_sub; ++s) {
    const uint8_t* bs = b + s * b_stride;
    __m512i c[kT];
#pragma GCC unroll 8
    for (int j = 0; j < kT; ++j) c[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < kS / 4; ++r) {
      const __m512i brow = _mm512_loadu_si512(bs + 64 * r);
#pragma GCC unroll 8
      for (int j = 0; j < kT; ++j) {
        int32_t a4;
        std::memcpy(&a4, qr.q + (t + j) * qr.n_pad + s * kS + 4 * r, 4);
        c[j] = _mm512_dpbusd_epi32(c[j], brow, _mm512_set1_epi32(a4));
      }
    }
    __m512 d, off;
    int64_t k;
    const uint8_t* span = SpanOf<kS, kF16>(group, L, s, k);
    SubScales<kS, kF16, kOff>(span, L, k, d, off);
#pragma GCC unroll 8
    for (int j = 0; j < kT; ++j) {
      alignas(64) int32_t c32[16];
      _mm512_store_si512(c32, c[j]);
      acc[j] = AmxEpilogueRow<kOff>(c32, d, off, qr.dx[(t + j) * dx_stride + s * kS / 4],
                                    qr.sx[(t + j) * qr.n_off + s], acc[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kT; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, valid, acc[j]);
}

using AmxRemainderFn = void (*)(const uint8_t*, int64_t, const uint8_t*, const PackedLayout&,
                                const QuantRows&, int64_t, float*, int64_t, __mmask16);

template <int kS, bool kF16, int kOff, int... kI>
constexpr std::array<AmxRemainderFn, sizeof...(kI)> AmxRemainderTable(
    std::integer_sequence<int, kI...>) {
  return {&AmxRemainder<kI + 1, kS, kF16, kOff>...};
}

/// AmxRemainder for n_tok tokens, 1 <= n_tok <= kAmxRemainderVnni.
template <int kS, bool kF16, int kOff>
AmxRemainderFn AmxRemainderFor(int n_tok) {
  static constexpr std::array<AmxRemainderFn, kAmxRemainderVnni> kTable =
      AmxRemainderTable<kS, kF16, kOff>(std::make_integer_sequence<int, kAmxRemainderVnni>{});
  return kTable[n_tok - 1];
}

/// Tokens [t0, t1) (16 at a time; the quantized rows are padded to a multiple of 16 with zero
/// rows; `at`: the same quants in tile order, see PackedMatmul) x one 16-row group. bbuf: n_sub *
/// 16 * kS bytes of scratch for U4 / U5 / U6 quants widened to bytes, which a call with `widen`
/// fills first (a later call for other tokens of the same group reuses them); cbuf: 2 x 16 x 16
/// int32 (one per tile set). `next_group`: the group the caller takes next (null: none); a call
/// with `widen` fetches its L.group_bytes into the cache while its first 16 tokens compute, so that
/// the next widening reads the cache rather than waiting on memory.
template <int kKind, int kS, bool kF16, int kOff>
__attribute__((target(HWY_TARGET_STR ",amx-tile,amx-int8"))) HWY_NOINLINE void AmxGroup(
    const uint8_t* group, const PackedLayout& L, const QuantRows& qr, const int8_t* at, int64_t t0,
    int64_t t1, float* y, int64_t y_stride, int n_valid, uint8_t* bbuf, int32_t* cbuf, bool widen,
    const uint8_t* next_group) {
  // B operands: U8 quants are tile-ready in place (U8 formats have fp16 scales: one span, the
  // quants contiguous); U4 / U5 / U6 are widened once per group.
  static_assert(kKind != internal::kPackU8 || kF16, "U8 in place needs one span");
  const uint8_t* b = group;
  int64_t b_stride = L.sub_quant_bytes;
  if constexpr (kKind != internal::kPackU8) {
    for (int64_t s = 0; s < L.n_sub && widen; ++s) {
      int64_t k;
      const uint8_t* q = SpanOf<kS, kF16>(group, L, s, k) + L.quants_offset + k * L.sub_quant_bytes;
      uint8_t* out = bbuf + s * 16 * kS;
      for (int j = 0; j < kS / 8; ++j) {
        __m512i lo, hi;
        WidenUnit<kKind, kS>(q, j, lo, hi);
        _mm512_store_si512(out + 128 * j, lo);
        _mm512_store_si512(out + 128 * j + 64, hi);
      }
    }
    b = bbuf;
    b_stride = 16 * kS;
  }
  const int64_t dx_stride = qr.n_pad / 4;
  // Prefetch of the next group: a slice of it per pair of sub-blocks of the first token block.
  const char* pf =
      widen && next_group != nullptr ? reinterpret_cast<const char*>(next_group) : nullptr;
  const int64_t pf_step =
      internal::round_up(internal::ceil_div(L.group_bytes, (L.n_sub + 1) / 2), int64_t{64});
  const char* const pf_end = pf != nullptr ? pf + L.group_bytes : nullptr;
  const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1);
  for (int64_t t = t0; t < t1; t += 16) {
    const int n_tok = static_cast<int>(std::min<int64_t>(16, t1 - t));
    if (n_tok <= kAmxRemainderVnni) {
      // A few tokens left: dots on the VNNI units from the widened rows.
      AmxRemainderFor<kS, kF16, kOff>(n_tok)(b, b_stride, group, L, qr, t, y, y_stride, valid);
      continue;
    }
    __m512 acc[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) acc[m] = _mm512_setzero_ps();
    const int8_t* aq = at + t * qr.n_pad;  // 16 tokens' tiles, kS x 16 bytes per sub-block
    const float* dx = qr.dx + t * dx_stride;
    const float* sx = qr.sx + t * qr.n_off;
    // Two tile sets in turn: sub-block s + 1's product runs while s's result is scaled.
    _tile_zero(0);
    _tile_loadd(1, aq, kS);
    _tile_loadd(2, b, 64);
    _tile_dpbsud(0, 1, 2);
    for (int64_t s = 0; s < L.n_sub; s += 2) {
      if (pf != nullptr) {
        for (int64_t off = 0; off < pf_step && pf < pf_end; off += 64, pf += 64) {
          _mm_prefetch(pf, _MM_HINT_T1);
        }
      }
      const bool next = s + 1 < L.n_sub;
      if (next) {
        _tile_zero(3);
        _tile_loadd(4, aq + (s + 1) * 16 * kS, kS);
        _tile_loadd(5, b + (s + 1) * b_stride, 64);
        _tile_dpbsud(3, 4, 5);
      }
      _tile_stored(0, cbuf, 64);
      AmxEpilogue<kS, kF16, kOff>(cbuf, group, L, s, dx + s * kS / 4, dx_stride, sx + s, qr.n_off,
                                  n_tok, acc);
      if (s + 2 < L.n_sub) {
        _tile_zero(0);
        _tile_loadd(1, aq + (s + 2) * 16 * kS, kS);
        _tile_loadd(2, b + (s + 2) * b_stride, 64);
        _tile_dpbsud(0, 1, 2);
      }
      if (next) {
        _tile_stored(3, cbuf + 256, 64);
        AmxEpilogue<kS, kF16, kOff>(cbuf + 256, group, L, s + 1, dx + (s + 1) * kS / 4, dx_stride,
                                    sx + s + 1, qr.n_off, n_tok, acc);
      }
    }
    pf = nullptr;  // the first block has fetched the next group
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) {  // constant indices after unrolling: acc never in memory
      if (m < n_tok) _mm512_mask_storeu_ps(y + (t + m) * y_stride, valid, acc[m]);
    }
  }
}

using AmxGroupFn = void (*)(const uint8_t*, const PackedLayout&, const QuantRows&, const int8_t*,
                            int64_t, int64_t, float*, int64_t, int, uint8_t*, int32_t*, bool,
                            const uint8_t*);

inline AmxGroupFn GetAmxGroup(PackedFormat f) {
  using internal::kPackU4;
  using internal::kPackU5;
  using internal::kPackU8;
  switch (f) {
    case PackedFormat::kQ4_0:
      return &AmxGroup<kPackU4, 32, true, 8>;
    case PackedFormat::kQ4_1:
      return &AmxGroup<kPackU4, 32, true, -1>;
    case PackedFormat::kQ5_0:
      return &AmxGroup<kPackU5, 32, true, 16>;
    case PackedFormat::kQ5_1:
      return &AmxGroup<kPackU5, 32, true, -1>;
    case PackedFormat::kQ8_0:
      return &AmxGroup<kPackU8, 32, true, 128>;
    case PackedFormat::kIQ4_NL:
      return &AmxGroup<kPackU8, 32, true, 128>;
    case PackedFormat::kQ4_K:
      return &AmxGroup<kPackU4, 32, false, -1>;
    case PackedFormat::kQ5_K:
      return &AmxGroup<kPackU5, 32, false, -1>;
    case PackedFormat::kQ6_K:
      return &AmxGroup<internal::kPackU6, 16, false, 32>;
    default:
      return nullptr;
  }
}

}  // namespace packed

#endif  // HWY_TARGET == HWY_AVX3_DL

/// The packed format of a weight type on this target (kNone: not packed here).
inline internal::PackedFormat PackedFormatFor(GgmlType type) {
#if HWY_TARGET == HWY_AVX3_DL
  return internal::packed_format_of(type);
#else
  (void)type;
  return internal::PackedFormat::kNone;
#endif
}

/// Packs rows [16 g0, 16 g1) of w (groups g0..g1-1) into out (group stride L.group_bytes).
inline void PackGroups(const internal::MatmulArgs& w, internal::PackedFormat f,
                       const internal::PackedLayout& L, int64_t g0, int64_t g1, uint8_t* out) {
#if HWY_TARGET == HWY_AVX3_DL
  IntKernel k;
  CHECK(GetIntKernel(w.type, &k)) << "no integer kernel for " << type_name(w.type);
  const internal::PackedFormatInfo info = internal::packed_format_info(f);
  const int S = info.sub;
  const int64_t n_pad = internal::round_up(w.n_in, internal::kPadElems);
  const int64_t n_off = OffsetLen(n_pad, k.format.group);
  std::vector<uint8_t> w8(16 * n_pad);
  std::vector<float> dw(16 * n_pad / 4), cw(std::max<int64_t>(1, 16 * n_off));
  const int64_t n_super = info.f16_scales ? 0 : w.n_in / 256;
  std::vector<uint16_t> kd(16 * std::max<int64_t>(1, n_super)), kdmin(kd.size());
  std::vector<int8_t> ksc(16 * std::max<int64_t>(1, L.n_sub)), km(ksc.size());
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + (g - g0) * L.group_bytes;
    std::memset(dst, 0, L.group_bytes);
    std::fill(w8.begin(), w8.end(), 0);
    std::fill(dw.begin(), dw.end(), 0.0f);
    std::fill(cw.begin(), cw.end(), 0.0f);
    std::fill(kd.begin(), kd.end(), uint16_t{0});
    std::fill(kdmin.begin(), kdmin.end(), uint16_t{0});
    std::fill(ksc.begin(), ksc.end(), int8_t{0});
    std::fill(km.begin(), km.end(), int8_t{0});
    for (int r = 0; r < 16; ++r) {
      const int64_t row = 16 * g + r;
      if (row >= w.n_out) break;
      k.unpack(w.w + row * w.w_row_bytes, w.n_in, n_pad, n_off, w8.data() + r * n_pad,
               dw.data() + r * (n_pad / 4), cw.data() + r * n_off);
      if (!info.f16_scales) {
        KScales(w.type, w.w + row * w.w_row_bytes, w.n_in, kd.data() + r * n_super,
                kdmin.data() + r * n_super, ksc.data() + r * L.n_sub, km.data() + r * L.n_sub);
      }
    }
    for (int64_t b = 0; b < n_super; ++b) {  // K-quants: one span per super-block
      uint8_t* sup = dst + b * L.span_bytes + L.super_offset;
      for (int r = 0; r < 16; ++r) {
        std::memcpy(sup + 2 * r, &kd[r * n_super + b], 2);
        if (info.offset < 0) std::memcpy(sup + 32 + 2 * r, &kdmin[r * n_super + b], 2);
      }
    }
    for (int64_t s = 0; s < L.n_sub; ++s) {
      const int64_t span_k = s % L.subs_per_span;
      uint8_t* span = dst + (s / L.subs_per_span) * L.span_bytes;
      uint8_t* q = span + L.quants_offset + span_k * L.sub_quant_bytes;
      for (int r = 0; r < 16; ++r) {
        const uint8_t* u = w8.data() + r * n_pad + s * S;
        for (int e = 0; e < S; ++e) {
          if (info.kind == internal::kPackU8) {
            q[64 * (e / 4) + 4 * r + e % 4] = u[e];
          } else {
            // Unit j = e / 8; elements 8j..8j+3 low nibbles, 8j+4..8j+7 high nibbles.
            const int j = e / 8, i = e % 4;
            const int shift = (e % 8) < 4 ? 0 : 4;
            q[64 * j + 4 * r + i] |= static_cast<uint8_t>((u[e] & 0x0F) << shift);
            if (info.kind == internal::kPackU5 && (u[e] & 0x10)) {
              uint64_t* masks = reinterpret_cast<uint64_t*>(q + 8 * S);
              masks[e / 4] |= uint64_t{1} << (4 * r + e % 4);
            }
            if (info.kind == internal::kPackU6) {
              const int pair = 2 * j + shift / 4;
              q[8 * S + 4 * r + i] |= static_cast<uint8_t>(((u[e] >> 4) & 3) << (2 * pair));
            }
          }
        }
        if (info.f16_scales) {
          // The scale (and offset) of the sub-block: constant over it in the unpacked form.
          const float d = dw[r * (n_pad / 4) + s * S / 4];
          const float c = info.offset < 0 ? cw[r * n_off + s * S / k.format.group] : 0.0f;
          const uint16_t dh = fp32_to_fp16(d), ch = fp32_to_fp16(c);
          std::memcpy(span + L.scales_offset + 32 * span_k + 2 * r, &dh, 2);
          if (info.offset < 0) std::memcpy(span + L.offsets_offset + 32 * span_k + 2 * r, &ch, 2);
        } else {
          span[L.scales_offset + 16 * span_k + r] = static_cast<uint8_t>(ksc[r * L.n_sub + s]);
          if (info.offset < 0) {
            span[L.offsets_offset + 16 * span_k + r] = static_cast<uint8_t>(km[r * L.n_sub + s]);
          }
        }
      }
    }
  }
#else
  (void)w;
  (void)f;
  (void)L;
  (void)g0;
  (void)g1;
  (void)out;
  CHECK(false) << "packing is only implemented on AVX3_DL";
#endif
}

/// y = x W^T with packed W: quantize x (one scale per 32, sums per sub-block), then tasks of
/// row groups x token chunks; inside a task every group stays in L1 while tiles of 8 tokens
/// pass over it.
inline void PackedMatmul(const internal::MatmulArgs& a, internal::PackedFormat f,
                         const internal::PackedLayout& L, const uint8_t* data) {
#if HWY_TARGET == HWY_AVX3_DL
  using internal::ceil_div;
  using internal::round_up;
  const internal::PackedFormatInfo info = internal::packed_format_info(f);
  const packed::TileFn tile = packed::GetTile(f);
  const int64_t n_pad = round_up(a.n_in, internal::kPadElems);
  const int64_t n_off = OffsetLen(n_pad, info.sub);
  const int64_t n_tokens = a.n_tokens;
  // Prompts (and batches of 9+ rows) on AMX CPUs take the tile path; its activation tiles read
  // 16 token rows at a time, so the quantized rows are padded with zero rows to a multiple of 16.
  // Measured on the 1.5B Q4_K_M, Xeon, 2 threads, VNNI against AMX: 8 rows 88-90 vs 90 tok/s
  // (even: the VNNI tile keeps them), 9 rows 89 vs 102, 10 rows 94-96 vs 110 (the VNNI tiles
  // take 9 and 10 rows in two passes, 8 + 1 and 8 + 2).
  constexpr int64_t kAmxMinTokens = 9;
  const bool use_amx = n_tokens >= kAmxMinTokens && internal::amx_available();
  const int64_t n_rows_q = use_amx ? round_up(n_tokens, 16) : n_tokens;
  // q, dx, sx, and for AMX the same q in tile order (below).
  const int64_t sx_end = round_up(n_rows_q * n_pad, 64) + 4 * round_up(n_rows_q * n_pad / 4, 16) +
                         4 * n_rows_q * n_off;
  const int64_t call_bytes = round_up(sx_end, 64) + (use_amx ? n_rows_q * n_pad : 0) + 64;
  uint8_t* call = static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(static_cast<size_t>(call_bytes)));
  QuantRows qr;
  qr.q = reinterpret_cast<int8_t*>(call);
  qr.dx = reinterpret_cast<float*>(call + round_up(n_rows_q * n_pad, 64));
  qr.sx = qr.dx + round_up(n_rows_q * n_pad / 4, 16);
  qr.n_pad = n_pad;
  qr.n_off = n_off;
  qr.group = info.sub;
  // Rows are quantized independently: batches split them over the threads.
  const auto quantize = [&](int64_t t0, int64_t t1) {
    QuantRows part = qr;
    part.q += t0 * n_pad;
    part.dx += t0 * (n_pad / 4);
    part.sx += t0 * n_off;
    QuantizeRows(a.x + t0 * a.x_stride, a.x_stride, t1 - t0, a.n_in, part);
    if (info.offset > 0) {
      for (int64_t i = 0; i < (t1 - t0) * n_off; ++i) {
        part.sx[i] *= static_cast<float>(-info.offset);
      }
    }
  };
  constexpr int64_t kQuantChunk = 8;
  if (a.pool != nullptr && n_tokens >= 2 * kQuantChunk) {
    internal::parallel_for(a.pool, ceil_div(n_tokens, kQuantChunk), [&](int64_t task, int) {
      quantize(task * kQuantChunk, std::min(n_tokens, (task + 1) * kQuantChunk));
    });
  } else {
    quantize(0, n_tokens);
  }
  if (n_rows_q > n_tokens) {
    const int64_t extra = n_rows_q - n_tokens;
    std::memset(qr.q + n_tokens * n_pad, 0, extra * n_pad);
    std::memset(qr.dx + n_tokens * (n_pad / 4), 0, extra * (n_pad / 4) * sizeof(float));
    std::memset(qr.sx + n_tokens * n_off, 0, extra * n_off * sizeof(float));
  }
  const packed::AmxGroupFn amx_group = use_amx ? packed::GetAmxGroup(f) : nullptr;
  // AMX reads activation tiles of 16 tokens x S bytes: copied once into that order (per 16
  // tokens, per sub-block, 16 rows of S bytes), a tile is 8 or 4 consecutive cache lines instead
  // of 16 half-read lines n_pad bytes apart.
  int8_t* at = use_amx ? reinterpret_cast<int8_t*>(call + round_up(sx_end, 64)) : nullptr;
  if (use_amx) {
    const int64_t S = info.sub;
    internal::parallel_for(a.pool, n_rows_q / 16, [&](int64_t blk, int) {
      int8_t* dst = at + blk * 16 * n_pad;
      for (int64_t m = 0; m < 16; ++m) {
        const int8_t* src = qr.q + (16 * blk + m) * n_pad;
        for (int64_t s = 0; s < n_pad / S; ++s) {
          if (S == 32) {
            std::memcpy(dst + s * 16 * 32 + m * 32, src + s * 32, 32);
          } else {
            std::memcpy(dst + s * 16 * 16 + m * 16, src + s * 16, 16);
          }
        }
      }
    });
  }

  const int64_t n_groups = ceil_div(a.n_out, 16);
  const int n_threads = internal::n_threads_of(a.pool);
  // Decoding: many small tasks for balance. Prompts: split groups first, then tokens.
  const int64_t groups_per_task =
      n_tokens <= 4 ? std::max<int64_t>(1, ceil_div(n_groups, 8 * static_cast<int64_t>(n_threads)))
                    : std::max<int64_t>(1, std::min<int64_t>(4, ceil_div(n_groups, 4 * n_threads)));
  const int64_t n_group_tasks = ceil_div(n_groups, groups_per_task);
  const int64_t want_token_tasks = ceil_div(4 * static_cast<int64_t>(n_threads), n_group_tasks);
  const int64_t n_token_tasks =
      std::clamp<int64_t>(want_token_tasks, 1, std::max<int64_t>(1, n_tokens / 32));
  const int64_t tokens_per_task = round_up(ceil_div(n_tokens, n_token_tasks), use_amx ? 16 : 8);
  // Decoding, and calls whose tokens are one task, take their groups in guided tasks
  // (internal::GuidedTasks): large contiguous streams first, one group at the end, so that the
  // threads finish within about a group of each other; the sizes above serve the other calls.
  const internal::GroupTokenTasks tasks(n_groups, n_tokens, n_threads, groups_per_task,
                                        n_token_tasks, tokens_per_task);
  internal::parallel_for(a.pool, tasks.n_tasks(), [&](int64_t task, int) {
    int64_t g0, g1, t0, t1;
    tasks.range(task, &g0, &g1, &t0, &t1);
    if (amx_group != nullptr) {
      // A task (guided: possibly many groups) runs in chunks of kAmxChunk groups. Every group of
      // a chunk is widened once; then blocks of tokens whose activations stay in L2 (about 512
      // KiB) pass over all of them, instead of each group streaming all the task's activations
      // (megabytes for a long row such as a 1.5B model's FFN down). With one block of tokens a
      // group is used once, so one buffer serves them all and stays in L1 beside the tiles.
      constexpr int64_t kAmxChunk = 4;
      const int64_t group_scratch = round_up(L.n_sub * 16 * info.sub, 64);
      const int64_t block =
          std::max<int64_t>(16, (int64_t{512} << 10) / std::max<int64_t>(1, n_pad) / 16 * 16);
      const int64_t n_slots = t1 - t0 <= block ? 1 : std::min(kAmxChunk, g1 - g0);
      uint8_t* bbuf = static_cast<uint8_t*>(
          internal::thread_scratch(internal::kSlotRows).get(n_slots * group_scratch + 64 * 33));
      int32_t* cbuf = reinterpret_cast<int32_t*>(bbuf + n_slots * group_scratch);
      if (info.sub == 16) {
        packed::AmxConfigure<16>();
      } else {
        packed::AmxConfigure<32>();
      }
      for (int64_t c0 = g0; c0 < g1; c0 += kAmxChunk) {
        const int64_t c1 = std::min(g1, c0 + kAmxChunk);
        for (int64_t tb = t0; tb < t1; tb += block) {
          const int64_t te = std::min(t1, tb + block);
          for (int64_t g = c0; g < c1; ++g) {
            const int n_valid = static_cast<int>(std::min<int64_t>(16, a.n_out - 16 * g));
            // The next group: this task's, or the one after the task (likely the next task's
            // first, in memory right after).
            const uint8_t* next = g + 1 < n_groups ? data + (g + 1) * L.group_bytes : nullptr;
            amx_group(data + g * L.group_bytes, L, qr, at, tb, te, a.y + 16 * g, a.y_stride,
                      n_valid, bbuf + (n_slots == 1 ? 0 : g - c0) * group_scratch, cbuf, tb == t0,
                      next);
          }
        }
      }
      packed::AmxRelease<0>();
      return;
    }
    for (int64_t g = g0; g < g1; ++g) {
      const int n_valid = static_cast<int>(std::min<int64_t>(16, a.n_out - 16 * g));
      const uint8_t* group = data + g * L.group_bytes;
      for (int64_t t = t0; t < t1;) {
        const int64_t left = t1 - t;
        const int nc = static_cast<int>(std::min<int64_t>(8, left));
        const int8_t* ap[8];
        const float* dxp[8];
        const float* sxp[8];
        for (int c = 0; c < nc; ++c) {
          ap[c] = qr.q + (t + c) * n_pad;
          dxp[c] = qr.dx + (t + c) * (n_pad / 4);
          sxp[c] = qr.sx + (t + c) * n_off;
        }
        tile(nc, group, L, ap, dxp, sxp, a.y + t * a.y_stride + 16 * g, a.y_stride, n_valid);
        t += nc;
      }
    }
  });
#else
  (void)a;
  (void)f;
  (void)L;
  (void)data;
  CHECK(false) << "packed matmul is only implemented on AVX3_DL";
#endif
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_PACKED_INL_H_
