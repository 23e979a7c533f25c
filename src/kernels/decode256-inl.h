// AVX2 fast path for matrix-vector products (decoding: up to 4 tokens) with the 32-element block
// types: each block is unpacked straight into one 256-bit register and dotted with the
// quantized activations, as decode512-inl.h does for AVX-512. Included once per Highway target
// by the per-type matmul units; the code exists only on the AVX2 target (toggle guard below).
//
// Hand intrinsics (isolated here): the 8-bit dot step (maddubs + madd, through DotQuads) and the
// 128-bit halves / byte shuffles that spread a block's nibbles and fifth bits, which Highway
// 1.0.3 expresses only through slower generic paths.
//
// Per block: w = 32 weight bytes in element order (u8; int8 for Q8_0 / IQ4_NL, which use the
// sign trick), d = the block scale, and an offset folded in as in decode512-inl.h: integer
// multiples of d (-8 d, -16 d) through the dot's starting value -k * (lane sums of the
// activations), the float minimum m of Q4_1 / Q5_1 as m * (dx * lane sums).

#if defined(MNEMO_KERNELS_DECODE256_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_DECODE256_INL_H_
#undef MNEMO_KERNELS_DECODE256_INL_H_
#else
#define MNEMO_KERNELS_DECODE256_INL_H_
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

#undef MNEMO_HAVE_FAST256
#if HWY_TARGET == HWY_AVX2
#define MNEMO_HAVE_FAST256 1
#else
#define MNEMO_HAVE_FAST256 0
#endif

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if MNEMO_HAVE_FAST256
namespace fast256 {

enum class Offset { kNone, kInt, kFloat };

/// [lo nibbles | hi nibbles] of 16 bytes: the 32 elements of a Q4-style block in order.
HWY_INLINE __m256i Nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/// 0x10 in each byte whose bit is set in the block's 32-bit qh word.
HWY_INLINE __m256i HighBits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  // Byte j gets byte j / 8 of qh; then test bit j % 8.
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

struct DecQ4_0 {
  static constexpr int kBytes = 18, kIntOffset = 8;
  static constexpr Offset kOffset = Offset::kInt;
  static constexpr bool kSigned = false;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float&) const {
    d = Half(b);
    return Nibbles(b + 2);
  }
};

struct DecQ4_1 {
  static constexpr int kBytes = 20, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float& m) const {
    d = Half(b);
    m = Half(b + 2);
    return Nibbles(b + 4);
  }
};

struct DecQ5_0 {
  static constexpr int kBytes = 22, kIntOffset = 16;
  static constexpr Offset kOffset = Offset::kInt;
  static constexpr bool kSigned = false;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float&) const {
    d = Half(b);
    return _mm256_or_si256(Nibbles(b + 6), HighBits(b + 2));
  }
};

struct DecQ5_1 {
  static constexpr int kBytes = 24, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kFloat;
  static constexpr bool kSigned = false;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float& m) const {
    d = Half(b);
    m = Half(b + 2);
    return _mm256_or_si256(Nibbles(b + 8), HighBits(b + 4));
  }
};

struct DecQ8_0 {
  static constexpr int kBytes = 34, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kNone;
  static constexpr bool kSigned = true;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float&) const {
    d = Half(b);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
};

struct DecIQ4_NL {
  static constexpr int kBytes = 18, kIntOffset = 0;
  static constexpr Offset kOffset = Offset::kNone;
  static constexpr bool kSigned = true;
  HWY_INLINE __m256i Load(const uint8_t* b, float& d, float&) const {
    d = Half(b);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    return _mm256_shuffle_epi8(table, Nibbles(b + 2));
  }
};

/// kR rows x kC tokens: y[c * y_stride + r] for r < n_rows (rows past n_rows repeat the last).
template <class Dec, int kR, int kC>
HWY_NOINLINE void GemvTile(const uint8_t* const* rows, int n_rows, int64_t n_in,
                           const int8_t* const* q, const float* const* dx, const float* const* aux,
                           float* y, int64_t y_stride) {
  const Dec dec;
  const DF32 df;
  __m256 acc[kR][kC];
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kC; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n_in / 32; ++b) {
    __m256i w[kR];
    float d[kR], m[kR];
    for (int r = 0; r < kR; ++r) w[r] = dec.Load(rows[r] + Dec::kBytes * b, d[r], m[r]);
    for (int c = 0; c < kC; ++c) {
      const hn::Vec<DI8> a{_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[c] + 32 * b))};
      const float dxc = dx[c][8 * b];  // the block scale, repeated for its 8 lanes
      __m256 auxv = _mm256_setzero_ps();
      if constexpr (Dec::kOffset != Offset::kNone) auxv = _mm256_loadu_ps(aux[c] + 8 * b);
      for (int r = 0; r < kR; ++r) {
        __m256i dot = DotQuads<Dec::kSigned>(hn::Vec<DU8>{w[r]}, a).raw;
        if constexpr (Dec::kOffset == Offset::kInt) {
          dot = _mm256_add_epi32(dot, _mm256_castps_si256(auxv));
        }
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d[r] * dxc), acc[r][c]);
        if constexpr (Dec::kOffset == Offset::kFloat) {
          acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(m[r]), auxv, acc[r][c]);
        }
      }
    }
  }
  for (int c = 0; c < kC; ++c) {
    if constexpr (kR == 4) {
      if (n_rows == 4) {
        Reduce4(df, hn::Vec<DF32>{acc[0][c]}, hn::Vec<DF32>{acc[1][c]}, hn::Vec<DF32>{acc[2][c]},
                hn::Vec<DF32>{acc[3][c]}, y + c * y_stride);
        continue;
      }
    }
    for (int r = 0; r < n_rows; ++r) {
      y[c * y_stride + r] = ReduceSum(df, hn::Vec<DF32>{acc[r][c]});
    }
  }
}

template <class Dec>
HWY_INLINE bool FusedApplies(const internal::MatmulArgs& a) {
  return a.n_tokens <= 4;
}

/// Quantize x (with lane sums), then rows in tasks of kR rows x all tokens.
template <class Dec>
void MatmulFused(const internal::MatmulArgs& a) {
  using internal::ceil_div;
  using internal::round_up;
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

  // 4 rows x 1 token or 2 rows x up to 4 tokens: accumulators and weights fit 16 registers.
  const int64_t kr = n_tokens == 1 ? 4 : 2;
  const int n_threads = internal::n_threads_of(a.pool);
  const int64_t rows_per_task = std::max<int64_t>(
      2 * kr, round_up(ceil_div(a.n_out, 8 * static_cast<int64_t>(n_threads)), 4));
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
    for (int64_t r = r0; r < r1; r += kr) {
      const int n = static_cast<int>(std::min<int64_t>(kr, r1 - r));
      const uint8_t* rows[4];
      for (int i = 0; i < 4; ++i) rows[i] = a.w + std::min<int64_t>(r + i, r1 - 1) * a.w_row_bytes;
      float* y = a.y + r;
      switch (n_tokens) {
        case 1:
          GemvTile<Dec, 4, 1>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
        case 2:
          GemvTile<Dec, 2, 2>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
        case 3:
          GemvTile<Dec, 2, 3>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
        default:
          GemvTile<Dec, 2, 4>(rows, n, a.n_in, qp, dxp, auxp, y, a.y_stride);
          break;
      }
    }
  });
}

}  // namespace fast256
#endif  // MNEMO_HAVE_FAST256

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_DECODE256_INL_H_
