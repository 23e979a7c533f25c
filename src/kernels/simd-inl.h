// Per-target SIMD primitives shared by the kernels: the 8-bit integer dot step, scalar fp16
// conversion, tile sizes. Included once per Highway target (toggle guard below); everything
// here is inline.
//
// Hand intrinsics live only here, each behind a target check, for the one operation Highway
// 1.0.3 lacks: a dot product of unsigned by signed bytes summed in groups of four into int32
// lanes (x86 maddubs + madd, or AVX-512 VNNI dpbusd; Highway added it later as
// SumOfMulQuadAccumulate).

// Per-target include guard: toggles between the passes of foreach_target.h.
#if defined(MNEMO_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_SIMD_INL_H_
#undef MNEMO_KERNELS_SIMD_INL_H_
#else
#define MNEMO_KERNELS_SIMD_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "mnemo/quant.h"

// MNEMO_INT_DOT: this target has the 8-bit integer dot (x86 SSSE3 and up). Elsewhere the
// quantized kernels dequantize to float and use the float path.
#undef MNEMO_INT_DOT
#if HWY_ARCH_X86 &&                                                                 \
    (HWY_TARGET == HWY_SSSE3 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_AVX2 || \
     HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define MNEMO_INT_DOT 1
#else
#define MNEMO_INT_DOT 0
#endif

// MNEMO_VNNI_ATTR: added to every function that (transitively, inlined) issues a VNNI
// instruction. Highway 1.0.3's AVX3_DL target attributes omit avx512vnni, although its run-time
// check requires it, so the attribute is safe on that target and only there. It names the whole
// target (HWY_TARGET_STR) plus avx512vnni: clang lets a function's own target attribute replace
// the one HWY_BEFORE_NAMESPACE pushes, where gcc adds to it.
#undef MNEMO_VNNI_ATTR
#if HWY_TARGET == HWY_AVX3_DL
#define MNEMO_VNNI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#define MNEMO_VNNI_ATTR
#endif

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// True where the dot step is VNNI dpbusd: it has no 16-bit intermediate, so signed weights are
/// stored offset by +128 (unsigned) and the offset is undone through the per-group offsets.
inline constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;

/// Register tile of the matmul micro-kernels: rows (weights) x columns (tokens). Chosen so that
/// kTileRows * kTileCols accumulators plus the operands fit the register file (32 zmm, 16 ymm /
/// xmm).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kTileRows = 4;
inline constexpr int kTileCols = 4;
#elif HWY_TARGET == HWY_SCALAR
inline constexpr int kTileRows = 2;
inline constexpr int kTileCols = 2;
#else
inline constexpr int kTileRows = 4;
inline constexpr int kTileCols = 2;
#endif

/// IEEE half -> float for one value (block scales).
HWY_INLINE float F16ToF32(uint16_t h) {
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
  return _cvtsh_ss(h);  // F16C is part of these targets
#else
  return mnemo::fp16_to_fp32(h);
#endif
}

#if MNEMO_INT_DOT

using DU8 = hn::ScalableTag<uint8_t>;
using DI8 = hn::ScalableTag<int8_t>;
using DI32 = hn::ScalableTag<int32_t>;
using DF32 = hn::ScalableTag<float>;

/// Lane j of the result is sum_{k<4} w[4j+k] * a[4j+k]: w unsigned bytes (kSigned: signed
/// bytes), a signed bytes in [-127, 127].
///   Unsigned w must be < 64 on targets without VNNI (the 16-bit pair sums of maddubs
///   saturate above 2 * 63 * 127 < 2^15 otherwise); larger weights are signed (kSigned), whose
///   magnitude the sign trick keeps <= 127. VNNI (dpbusd) has no such limit and is only
///   called with kSigned = false.
template <bool kSigned>
MNEMO_VNNI_ATTR HWY_INLINE hn::Vec<DI32> DotQuads(hn::Vec<DU8> w, hn::Vec<DI8> a) {
#if HWY_TARGET == HWY_AVX3_DL
  static_assert(!kSigned, "VNNI stores signed weights offset by 128");
  return hn::Vec<DI32>{_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.raw, a.raw)};
#elif HWY_TARGET == HWY_AVX3
  __m512i wr = w.raw;
  __m512i ar = a.raw;
  if constexpr (kSigned) {  // no vpsignb on 512 bits: negate a where w < 0, then take |w|
    const __mmask64 neg = _mm512_movepi8_mask(wr);
    ar = _mm512_mask_sub_epi8(ar, neg, _mm512_setzero_si512(), ar);
    wr = _mm512_abs_epi8(wr);
  }
  return hn::Vec<DI32>{_mm512_madd_epi16(_mm512_maddubs_epi16(wr, ar), _mm512_set1_epi16(1))};
#elif HWY_TARGET == HWY_AVX2
  __m256i wr = w.raw;
  __m256i ar = a.raw;
  if constexpr (kSigned) {
    ar = _mm256_sign_epi8(ar, wr);
    wr = _mm256_sign_epi8(wr, wr);
  }
  return hn::Vec<DI32>{_mm256_madd_epi16(_mm256_maddubs_epi16(wr, ar), _mm256_set1_epi16(1))};
#else  // SSSE3 / SSE4
  __m128i wr = w.raw;
  __m128i ar = a.raw;
  if constexpr (kSigned) {
    ar = _mm_sign_epi8(ar, wr);
    wr = _mm_sign_epi8(wr, wr);
  }
  return hn::Vec<DI32>{_mm_madd_epi16(_mm_maddubs_epi16(wr, ar), _mm_set1_epi16(1))};
#endif
}

#endif  // MNEMO_INT_DOT

/// Sum of all lanes as a scalar.
template <class D>
HWY_INLINE hn::TFromD<D> ReduceSum(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

#if HWY_TARGET != HWY_SCALAR
/// out[j] = sum of all lanes of v_j, j < 4: a transpose-and-add tree (about 13 operations on
/// 512-bit vectors instead of 4 separate horizontal sums of ~8 each).
template <class D>
HWY_INLINE void Reduce4(D d, hn::Vec<D> v0, hn::Vec<D> v1, hn::Vec<D> v2, hn::Vec<D> v3,
                        float* HWY_RESTRICT out) {
  // Per 128-bit block: s01 = [v0 pair sums, v1 pair sums] interleaved, likewise s23.
  const auto s01 = hn::Add(hn::InterleaveLower(d, v0, v1), hn::InterleaveUpper(d, v0, v1));
  const auto s23 = hn::Add(hn::InterleaveLower(d, v2, v3), hn::InterleaveUpper(d, v2, v3));
  const hn::Repartition<uint64_t, D> d64;
  const auto a = hn::BitCast(d64, s01);
  const auto b = hn::BitCast(d64, s23);
  // Per block: [v0, v1, v2, v3] partial sums.
  const auto t = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, a, b)),
                         hn::BitCast(d, hn::InterleaveUpper(d64, a, b)));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const hn::Full256<float> d8;
  const hn::Full128<float> d4;
  const auto h = hn::Add(hn::LowerHalf(d8, t), hn::UpperHalf(d8, t));
  hn::StoreU(hn::Add(hn::LowerHalf(d4, h), hn::UpperHalf(d4, h)), d4, out);
#elif HWY_TARGET == HWY_AVX2
  const hn::Full128<float> d4;
  hn::StoreU(hn::Add(hn::LowerHalf(d4, t), hn::UpperHalf(d4, t)), d4, out);
#else
  hn::StoreU(t, d, out);
#endif
}
#endif  // HWY_TARGET != HWY_SCALAR

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_SIMD_INL_H_
