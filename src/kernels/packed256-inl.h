// Packed weights for 256-bit targets (AVX2, and AVX3 = AVX-512 without VNNI): the 8-row
// interleaved layout, its packer and its matmul, per Highway target. Included (through
// foreach_target.h) only by packed.cc; toggle guard below. The kernels exist on the AVX2 and AVX3
// targets only (MNEMO_HAVE_PACKED256); AVX3_DL has the 16-row VNNI layout of packed-inl.h.
//
// Layout of one group of 8 rows (rows past n_out are zero, their outputs dropped): n_sub
// records, one per sub-block of S elements (S = 32; 16 for Q6_K). For the 32-element types each
// record is
//   [quants][d: 8 fp16 scales][c: 8 fp16 offsets, Q4_1 / Q5_1 only]
// For the K-quants the records come in spans of one 256-element super-block, each span headed by
// the super-block scales of the 8 rows, so the rows keep the GGUF's compact scales:
//   span   [D: 8 fp16 super-scales d][M: 8 fp16 super-mins dmin, Q4_K / Q5_K only][256 / S records]
//   record [quants][sc: 8 int8 sub-block scales][m: 8 int8 sub-block mins, Q4_K / Q5_K only]
// and a record's scale is d = D sc, its offset c = -M m (exact float products, the values the
// unpacked form holds).
// quants, in 32-byte units whose 32-bit lane r holds 4 elements of row r (so one maddubs against
// 4 activations broadcast to every lane works on 8 rows at once, with no shuffles and no
// horizontal sums):
//   U4 (Q4_0, Q4_1, Q4_K): S/8 units; byte i of lane r in unit j holds element 8j+i of row r in
//       its low nibble and element 8j+4+i in its high nibble.
//   U5 (Q5_0, Q5_1, Q5_K): the U4 units, then 32 bytes of fifth bits: byte 4r+i, bit 2j is the
//       fifth bit of element 8j+i of row r, bit 2j+1 that of element 8j+4+i.
//   U6 (Q6_K): the U4 units of the low four bits, then 32 bytes of high bit pairs: byte 4r+i,
//       bits 2(2j+h) and 2(2j+h)+1 hold bits 4 and 5 of element 8j+4h+i of row r (S = 16: j < 2).
//   S8 (Q8_0): S/4 units; lane r of unit k holds elements 4k..4k+3 of row r as int8 bytes.
// IQ4_NL (not in the models we ship for) is not packed: as bytes it would double in size.
// Element = d u + c (float offset), d (u - k) (integer offset k: 8 for Q4_0, 16 for Q5_0, 32 for
// Q6_K), or d u (S8). Sizes equal the GGUF rows for the 32-element types; Q4_K / Q5_K are 3% / 2%
// larger (one byte per scale instead of six bits), Q6_K 0.5% (its fp16 d once per 8 rows' span).
//
// The result of one (row, token) is, by construction, one fixed sequence of float operations
// (the canonical order every mnemo matmul path follows on this target): for each sub-block s in
// order, with isum the exact int32 dot of the sub-block's quants with the token's 8-bit
// activations q, dx the activations' block scale and sx = dx * (mult * sum of q over the
// sub-block) (mult = -k for integer offsets, 1 for float offsets):
//   acc = fma(float(isum), d * dx, acc);  then acc = fma(d, sx, acc) or acc = fma(c, sx, acc).
// Every tile width runs this same sequence per element, so a token's outputs do not depend on the
// other tokens of the call, the tile it lands in, or the thread that computes it.

#if defined(MNEMO_KERNELS_PACKED256_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_PACKED256_INL_H_
#undef MNEMO_KERNELS_PACKED256_INL_H_
#else
#define MNEMO_KERNELS_PACKED256_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/matmul-inl.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"

#undef MNEMO_HAVE_PACKED256
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define MNEMO_HAVE_PACKED256 1
#else
#define MNEMO_HAVE_PACKED256 0
#endif

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if MNEMO_HAVE_PACKED256

namespace p8 {

enum Kind : int { kU4 = 0, kU5 = 1, kU6 = 2, kS8 = 3 };

/// How one weight type is packed.
struct Fmt {
  int kind = kU4;
  int sub = 32;     // S: elements per sub-block
  bool f16 = true;  // true: fp16 d (and c) per record; false: K-quant spans (super-block scales)
  int offset = 0;   // k > 0: element = d (u - k); -1: d u + c; 0: d u
};

inline bool FormatOf(GgmlType type, Fmt* f) {
  switch (type) {
    case GgmlType::Q4_0:
      *f = {kU4, 32, true, 8};
      return true;
    case GgmlType::Q4_1:
      *f = {kU4, 32, true, -1};
      return true;
    case GgmlType::Q5_0:
      *f = {kU5, 32, true, 16};
      return true;
    case GgmlType::Q5_1:
      *f = {kU5, 32, true, -1};
      return true;
    case GgmlType::Q8_0:
      *f = {kS8, 32, true, 0};
      return true;
    case GgmlType::Q4_K:
      *f = {kU4, 32, false, -1};
      return true;
    case GgmlType::Q5_K:
      *f = {kU5, 32, false, -1};
      return true;
    case GgmlType::Q6_K:
      *f = {kU6, 16, false, 32};
      return true;
    default:
      return false;
  }
}

constexpr int64_t QuantBytes(int kind, int sub) {
  return kind == kU4 ? 4 * sub : kind == kU5 ? 4 * sub + 32 : kind == kU6 ? 6 * sub : 8 * sub;
}
constexpr int64_t RecordBytes(int kind, int sub, bool f16, int offset) {
  return QuantBytes(kind, sub) + 8 * (f16 ? 2 : 1) * (offset < 0 ? 2 : 1);
}
inline int64_t RecordBytes(const Fmt& f) { return RecordBytes(f.kind, f.sub, f.f16, f.offset); }
/// Bytes of the super-block header that opens each span of a K-quant group (0 otherwise).
constexpr int64_t SpanHeaderBytes(bool f16, int offset) {
  return f16 ? 0 : 16 * (offset < 0 ? 2 : 1);
}
/// Bytes of one 8-row group of rows of n_in elements.
inline int64_t GroupBytes(const Fmt& f, int64_t n_in) {
  const int64_t n_sub = n_in / f.sub;
  const int64_t n_span = f.f16 ? 0 : n_in / 256;
  return n_sub * RecordBytes(f) + n_span * SpanHeaderBytes(f.f16, f.offset);
}

/// Packs rows [8 g0, 8 g1) of w (groups g0..g1-1) into out (group stride n_sub * RecordBytes).
inline void PackGroups(const internal::MatmulArgs& w, const Fmt& f, int64_t g0, int64_t g1,
                       uint8_t* out) {
  IntKernel k;
  CHECK(GetIntKernel(w.type, &k)) << "no integer kernel for " << type_name(w.type);
  const int S = f.sub;
  const int64_t n_pad = internal::round_up(w.n_in, internal::kPadElems);
  const int64_t n_off = OffsetLen(n_pad, k.format.group);
  const int64_t n_sub = w.n_in / S;
  const int64_t rec = RecordBytes(f);
  const int64_t qb = QuantBytes(f.kind, S);
  const int64_t header = SpanHeaderBytes(f.f16, f.offset);
  const int64_t per_span = f.f16 ? n_sub : 256 / S;  // records after each header
  const int64_t group_bytes = GroupBytes(f, w.n_in);
  const int64_t n_span = w.n_in / 256;
  std::vector<uint8_t> w8(8 * n_pad);
  std::vector<float> dw(8 * n_pad / 4), cw(std::max<int64_t>(1, 8 * n_off));
  std::vector<uint16_t> kd(8 * std::max<int64_t>(1, n_span)), kdmin(kd.size());
  std::vector<int8_t> ksc(8 * std::max<int64_t>(1, n_sub)), km(ksc.size());
  // Record s of the group; K-quant spans put a header before every per_span records.
  auto record = [&](uint8_t* grp, int64_t s) {
    return grp + (s / per_span + 1) * header + s * rec;
  };
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + (g - g0) * group_bytes;
    std::memset(dst, 0, group_bytes);
    std::fill(kd.begin(), kd.end(), uint16_t{0});
    std::fill(kdmin.begin(), kdmin.end(), uint16_t{0});
    std::fill(ksc.begin(), ksc.end(), int8_t{0});
    std::fill(km.begin(), km.end(), int8_t{0});
    std::fill(w8.begin(), w8.end(), 0);
    std::fill(dw.begin(), dw.end(), 0.0f);
    std::fill(cw.begin(), cw.end(), 0.0f);
    for (int r = 0; r < 8; ++r) {
      const int64_t row = 8 * g + r;
      if (row >= w.n_out) break;
      k.unpack(w.w + row * w.w_row_bytes, w.n_in, n_pad, n_off, w8.data() + r * n_pad,
               dw.data() + r * (n_pad / 4), cw.data() + r * n_off);
      if (!f.f16) {
        KScales(w.type, w.w + row * w.w_row_bytes, w.n_in, kd.data() + r * n_span,
                kdmin.data() + r * n_span, ksc.data() + r * n_sub, km.data() + r * n_sub);
      }
    }
    if (!f.f16) {
      for (int64_t b = 0; b < n_span; ++b) {
        uint8_t* h = dst + b * (header + per_span * rec);
        for (int r = 0; r < 8; ++r) {
          std::memcpy(h + 2 * r, &kd[r * n_span + b], 2);
          if (f.offset < 0) std::memcpy(h + 16 + 2 * r, &kdmin[r * n_span + b], 2);
        }
      }
    }
    for (int64_t s = 0; s < n_sub; ++s) {
      uint8_t* q = record(dst, s);
      for (int r = 0; r < 8; ++r) {
        const uint8_t* u = w8.data() + r * n_pad + s * S;
        for (int e = 0; e < S; ++e) {
          if (f.kind == kS8) {
            q[32 * (e / 4) + 4 * r + e % 4] = u[e];
          } else {
            const int j = e / 8, i = e % 4, hi = (e % 8) >= 4 ? 1 : 0;
            q[32 * j + 4 * r + i] |= static_cast<uint8_t>((u[e] & 0x0F) << (4 * hi));
            if (f.kind == kU5 && (u[e] & 0x10)) {
              q[4 * S + 4 * r + i] |= static_cast<uint8_t>(1u << (2 * j + hi));
            }
            if (f.kind == kU6) {
              q[4 * S + 4 * r + i] |= static_cast<uint8_t>(((u[e] >> 4) & 3) << (2 * (2 * j + hi)));
            }
          }
        }
        // The scale (and offset) of the sub-block: constant over it in the unpacked form.
        if (f.f16) {
          const float d = dw[r * (n_pad / 4) + s * S / 4];
          const float c = f.offset < 0 ? cw[r * n_off + s * S / k.format.group] : 0.0f;
          const uint16_t dh = fp32_to_fp16(d), ch = fp32_to_fp16(c);
          std::memcpy(q + qb + 2 * r, &dh, 2);
          if (f.offset < 0) std::memcpy(q + qb + 16 + 2 * r, &ch, 2);
        } else {
          q[qb + r] = static_cast<uint8_t>(ksc[r * n_sub + s]);
          if (f.offset < 0) q[qb + 8 + r] = static_cast<uint8_t>(km[r * n_sub + s]);
        }
      }
    }
  }
}

/// The activations of one call in the form the tiles read, one row per token: q[n_pad] int8
/// (8 bits per 32 elements, as QuantizeRows), dx[n_sub] the block scale of each sub-block, and
/// sx[n_sub] = dx * (mult * sum of q over the sub-block), the integer sum formed first.
struct Acts {
  int8_t* q = nullptr;
  float* dx = nullptr;
  float* sx = nullptr;
  int64_t n_pad = 0;
  int64_t n_sub = 0;
};

inline void QuantizeActs(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t n_in,
                         int sub, int mult, const Acts& out) {
  const DF32 df;
  const hn::Rebind<int32_t, DF32> di;
  const hn::Rebind<int8_t, DF32> d8;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  // Every format's sub-blocks (16 or 32 elements) lie within the 32-element blocks of x's
  // scales and are whole vectors on these targets (8 or 16 floats). Each sub-block's stored
  // bytes are summed as int32 vectors, an exact sum in any order; the bytes, not the values
  // before narrowing, since narrowing saturates what a non-finite x rounds to (INT_MIN). This
  // runs on one thread while the others wait (decoding quantizes one row per matmul).
  CHECK(sub > 0 && sub <= 32 && 32 % sub == 0 && sub % nf == 0) << "bad sub-block " << sub;
  const int64_t sub_vectors = sub / nf;
  const int64_t subs_per_block = 32 / sub;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * x_stride;
    int8_t* q = out.q + t * out.n_pad;
    float* dx = out.dx + t * out.n_sub;
    float* sx = out.sx + t * out.n_sub;
    for (int64_t b = 0; b < n_in / 32; ++b) {
      const float* xb = xr + 32 * b;
      auto vmax = hn::Zero(df);
      for (int64_t j = 0; j < 32; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
      const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      const float d = amax / 127.0f;
      const auto inv = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
      int64_t s = b * subs_per_block;
      int64_t k = 0;
      auto isum = hn::Zero(di);
      for (int64_t j = 0; j < 32; j += nf) {
        const auto q8 = hn::DemoteTo(d8, hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), inv)));
        hn::StoreU(q8, d8, q + 32 * b + j);
        isum = hn::Add(isum, hn::PromoteTo(di, q8));
        if (++k == sub_vectors) {
          k = 0;
          dx[s] = d;
          sx[s] = d * static_cast<float>(mult * ReduceSum(di, isum));
          ++s;
          isum = hn::Zero(di);
        }
      }
    }
    if (out.n_pad > n_in) std::memset(q + n_in, 0, out.n_pad - n_in);
  }
}

HWY_INLINE __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// Fifth bits of unit j's low (kHi = 0) or high (kHi = 1) nibbles, as 0x10 per byte, from the
/// 32 bytes m of fifth bits (bit 2j + kHi of each byte).
template <int kBit>
HWY_INLINE __m256i FifthBits(__m256i m) {
  if constexpr (kBit < 4) {
    return _mm256_and_si256(_mm256_slli_epi16(m, 4 - kBit), _mm256_set1_epi8(0x10));
  } else if constexpr (kBit == 4) {
    return _mm256_and_si256(m, _mm256_set1_epi8(0x10));
  } else {
    return _mm256_and_si256(_mm256_srli_epi16(m, kBit - 4), _mm256_set1_epi8(0x10));
  }
}

/// Bits 4 and 5 of unit j's low (kHi = 0) or high (kHi = 1) elements, as 0x30 per byte, from
/// the 32 bytes m of U6 high bit pairs (bits kBit and kBit + 1 of each byte, kBit = 2(2j+kHi)).
template <int kBit>
HWY_INLINE __m256i HighPairs(__m256i m) {
  if constexpr (kBit < 4) {
    return _mm256_and_si256(_mm256_slli_epi16(m, 4 - kBit), _mm256_set1_epi8(0x30));
  } else if constexpr (kBit == 4) {
    return _mm256_and_si256(m, _mm256_set1_epi8(0x30));
  } else {
    return _mm256_and_si256(_mm256_srli_epi16(m, kBit - 4), _mm256_set1_epi8(0x30));
  }
}

/// An empty statement that takes v in a vector register: GCC then keeps a running sum as a chain
/// instead of reassociating it into a tree of products all held at once (integer adds are
/// associative), which on AVX2's 16 registers spilled most of a tile's partial sums to the stack.
HWY_INLINE void KeepInRegister(__m256i& v) { asm("" : "+x"(v)); }

/// Unit j of a U4 / U5 / U6 record: the 8 rows' elements 8j..8j+3 (lo) and 8j+4..8j+7 (hi),
/// bytes.
template <int kKind, int kJ>
HWY_INLINE void LoadNibbles(const uint8_t* rec, __m256i fifth, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 * kJ));
  lo = _mm256_and_si256(v, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if constexpr (kKind == kU5) {
    lo = _mm256_or_si256(lo, FifthBits<2 * kJ>(fifth));
    hi = _mm256_or_si256(hi, FifthBits<2 * kJ + 1>(fifth));
  } else if constexpr (kKind == kU6) {
    lo = _mm256_or_si256(lo, HighPairs<4 * kJ>(fifth));
    hi = _mm256_or_si256(hi, HighPairs<4 * kJ + 2>(fifth));
  }
}

/// Int16 pair sums of units [kJ0, kJ1) for kC tokens, added to p16 (U4 / U5).
template <int kKind, int kJ, int kJ1, int kC>
HWY_INLINE void NibbleUnits(const uint8_t* rec, __m256i fifth, const int8_t* const* a, int64_t e0,
                            __m256i (&p16)[kC]) {
  if constexpr (kJ < kJ1) {
    __m256i lo, hi;
    LoadNibbles<kKind, kJ>(rec, fifth, lo, hi);
    // Each token's sum takes the low elements' products, then the high ones', one add at a
    // time (KeepInRegister). Int16 adds wrap and never overflow here, so their order does not
    // change the sums.
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) {
      p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(lo, Bcast4(a[c] + e0 + 8 * kJ)));
      KeepInRegister(p16[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) {
      p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(hi, Bcast4(a[c] + e0 + 8 * kJ + 4)));
      KeepInRegister(p16[c]);
    }
    NibbleUnits<kKind, kJ + 1, kJ1, kC>(rec, fifth, a, e0, p16);
  }
}

/// How far ahead of the record being read Tile() prefetches into L1 (T0), in bytes; the far
/// prefetch into L2 (T2) is internal::g_far_prefetch_bytes ahead (as the 16-row layout does:
/// packed-inl.h says why). Measured (`MNEMO_SIMD=AVX2 kernels_bench` BM_MatmulStream, Xeon,
/// 2 threads) against one T0 prefetch 2 KiB ahead, with T2 at 4 KiB: q4_K 1536 x 1536 20.6 ->
/// 25.2 GB/s, 17920 x 1536 20.8 -> 26.5; q6_K 23.0 -> 31.5 and 24.2 -> 30.6, beside a plain
/// read of 28-33 GB/s.
inline constexpr int64_t kPrefetchL1 = 1024;

/// One 8-row group x kC tokens: y[c * y_stride + r] for r < n_valid, c < kC.
template <int kKind, int kS, bool kF16, int kOff, int kC>
HWY_NOINLINE void Tile(const uint8_t* group, int64_t n_sub, const int8_t* const* a,
                       const float* const* dx, const float* const* sx, float* y, int64_t y_stride,
                       int n_valid) {
  constexpr int64_t kQb = QuantBytes(kKind, kS);
  constexpr int64_t kRec = RecordBytes(kKind, kS, kF16, kOff);
  constexpr int64_t kHeader = SpanHeaderBytes(kF16, kOff);
  constexpr int64_t kPerSpan = 256 / kS;  // K-quant records per span
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kC];
#pragma GCC unroll 8
  for (int c = 0; c < kC; ++c) acc[c] = _mm256_setzero_ps();
  __m256 dsup = _mm256_setzero_ps(), msup = _mm256_setzero_ps();  // K-quant span scales
  const uint8_t* rec = group;
  const int64_t far = internal::g_far_prefetch_bytes;
  for (int64_t s = 0; s < n_sub; ++s, rec += kRec) {
    // Software prefetch: the hardware prefetchers stop at 4 KiB pages, and a decode streams
    // each group from memory once (measured: 1.4x tg on a 1.5B model with the first, T0 only).
    // Full tiles of 8 tokens (prompts: compute-bound, a group read once per 8 tokens) skip the
    // far one: with it pp512 measured 1.5-3% slower, close to this host's noise.
    for (int64_t b = 0; b < kRec; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(rec) + kPrefetchL1 + b, _MM_HINT_T0);
      if constexpr (kC < 8) {
        _mm_prefetch(reinterpret_cast<const char*>(rec) + far + b, _MM_HINT_T2);
      }
    }
    if constexpr (!kF16) {
      if (s % kPerSpan == 0) {  // a span header: the 8 rows' super-block d (and -dmin)
        dsup = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
        if constexpr (kOff < 0) {
          const __m256 m =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16)));
          msup = _mm256_xor_ps(m, _mm256_set1_ps(-0.0f));
        }
        rec += kHeader;
      }
    }
    const int64_t e0 = s * kS;
    __m256i isum[kC];
    if constexpr (kKind == kU4) {
      // 16 products of at most 15 * 127 per int16 lane: no overflow.
      __m256i p16[kC];
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) p16[c] = _mm256_setzero_si256();
      NibbleUnits<kU4, 0, kS / 8, kC>(rec, _mm256_setzero_si256(), a, e0, p16);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) isum[c] = _mm256_madd_epi16(p16[c], ones);
    } else if constexpr (kKind == kU5) {
      // At most 8 products of 31 * 127 per int16 lane: flush to int32 every two units.
      const __m256i fifth = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 4 * kS));
      __m256i p16[kC];
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) p16[c] = _mm256_setzero_si256();
      NibbleUnits<kU5, 0, 2, kC>(rec, fifth, a, e0, p16);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) {
        isum[c] = _mm256_madd_epi16(p16[c], ones);
        p16[c] = _mm256_setzero_si256();
      }
      NibbleUnits<kU5, 2, 4, kC>(rec, fifth, a, e0, p16);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c)
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p16[c], ones));
    } else if constexpr (kKind == kU6) {
      // S = 16: 2 units; at most 4 products of 63 * 127 per int16 lane between flushes.
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 4 * kS));
      __m256i p16[kC];
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) p16[c] = _mm256_setzero_si256();
      NibbleUnits<kU6, 0, 1, kC>(rec, pairs, a, e0, p16);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) {
        isum[c] = _mm256_madd_epi16(p16[c], ones);
        p16[c] = _mm256_setzero_si256();
      }
      NibbleUnits<kU6, 1, 2, kC>(rec, pairs, a, e0, p16);
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c)
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p16[c], ones));
    } else {  // kS8: signed weights through the sign trick; |w| <= 128, one pair per int16.
#pragma GCC unroll 8
      for (int c = 0; c < kC; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int u = 0; u < kS / 4; ++u) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 * u));
        const __m256i av = _mm256_sign_epi8(v, v);
#pragma GCC unroll 8
        for (int c = 0; c < kC; ++c) {
          const __m256i as = _mm256_sign_epi8(Bcast4(a[c] + e0 + 4 * u), v);
          isum[c] =
              _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, as), ones));
          KeepInRegister(isum[c]);
        }
      }
    }
    __m256 d, off = _mm256_setzero_ps();
    if constexpr (kF16) {
      d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kQb)));
      if constexpr (kOff < 0) {
        off = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kQb + 16)));
      }
    } else {  // d = D sc and c = -M m: the exact products the unpacked form holds
      int64_t sc8;
      std::memcpy(&sc8, rec + kQb, 8);
      d = _mm256_mul_ps(dsup, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(sc8))));
      if constexpr (kOff < 0) {
        int64_t m8;
        std::memcpy(&m8, rec + kQb + 8, 8);
        off = _mm256_mul_ps(msup, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(m8))));
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) {
      const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(dx[c][s]));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), scale, acc[c]);
      if constexpr (kOff > 0) {
        acc[c] = _mm256_fmadd_ps(d, _mm256_set1_ps(sx[c][s]), acc[c]);
      } else if constexpr (kOff < 0) {
        acc[c] = _mm256_fmadd_ps(off, _mm256_set1_ps(sx[c][s]), acc[c]);
      }
    }
  }
  if (n_valid == 8) {
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) _mm256_storeu_ps(y + c * y_stride, acc[c]);
  } else {
    alignas(32) float tmp[8];
    for (int c = 0; c < kC; ++c) {
      _mm256_store_ps(tmp, acc[c]);
      std::memcpy(y + c * y_stride, tmp, n_valid * sizeof(float));
    }
  }
}

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t* const*, const float* const*,
                        const float* const*, float*, int64_t, int);

/// Tiles of one format for 1..4 tokens (index = tokens - 1).
struct Tiles {
  TileFn fn[4] = {};
};

template <int kKind, int kS, bool kF16, int kOff>
Tiles MakeTiles() {
  return {{&Tile<kKind, kS, kF16, kOff, 1>, &Tile<kKind, kS, kF16, kOff, 2>,
           &Tile<kKind, kS, kF16, kOff, 3>, &Tile<kKind, kS, kF16, kOff, 4>}};
}

inline Tiles GetTiles(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return MakeTiles<kU4, 32, true, 8>();
    case GgmlType::Q4_1:
      return MakeTiles<kU4, 32, true, -1>();
    case GgmlType::Q5_0:
      return MakeTiles<kU5, 32, true, 16>();
    case GgmlType::Q5_1:
      return MakeTiles<kU5, 32, true, -1>();
    case GgmlType::Q8_0:
      return MakeTiles<kS8, 32, true, 0>();
    case GgmlType::Q4_K:
      return MakeTiles<kU4, 32, false, -1>();
    case GgmlType::Q5_K:
      return MakeTiles<kU5, 32, false, -1>();
    case GgmlType::Q6_K:
      return MakeTiles<kU6, 16, false, 32>();
    default:
      return {};
  }
}

/// y = x W^T with W packed in 8-row groups: quantize x (tokens split over threads when there
/// are many), then tasks of row groups x token ranges; inside a task each group stays in L1
/// while tiles of up to 4 tokens pass over it.
inline void Matmul(const internal::MatmulArgs& a, const uint8_t* data) {
  using internal::ceil_div;
  using internal::round_up;
  Fmt f;
  CHECK(FormatOf(a.type, &f)) << "no 8-row packed format for " << type_name(a.type);
  const Tiles tiles = GetTiles(a.type);
  const int64_t n_pad = round_up(a.n_in, internal::kPadElems);
  const int64_t n_sub = a.n_in / f.sub;
  const int64_t group_bytes = GroupBytes(f, a.n_in);
  const int64_t n_tokens = a.n_tokens;
  const int64_t call_bytes = n_tokens * (n_pad + 8 * round_up(n_sub, 16)) + 4 * 64;
  uint8_t* call = static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(static_cast<size_t>(call_bytes)));
  Acts acts;
  acts.q = reinterpret_cast<int8_t*>(call);
  acts.dx = reinterpret_cast<float*>(call + round_up(n_tokens * n_pad, 64));
  acts.sx = acts.dx + round_up(n_tokens * n_sub, 16);
  acts.n_pad = n_pad;
  acts.n_sub = n_sub;
  const int mult = f.offset > 0 ? -f.offset : 1;
  constexpr int64_t kQuantChunk = 16;
  if (a.pool != nullptr && n_tokens >= 2 * kQuantChunk) {
    internal::parallel_for(a.pool, ceil_div(n_tokens, kQuantChunk), [&](int64_t task, int) {
      const int64_t t0 = task * kQuantChunk;
      QuantizeActs(a.x, a.x_stride, t0, std::min(n_tokens, t0 + kQuantChunk), a.n_in, f.sub, mult,
                   acts);
    });
  } else {
    QuantizeActs(a.x, a.x_stride, 0, n_tokens, a.n_in, f.sub, mult, acts);
  }

  const int64_t n_groups = ceil_div(a.n_out, 8);
  const int n_threads = internal::n_threads_of(a.pool);
  // Decoding: many small tasks for balance. Prompts: split groups first, then tokens.
  const int64_t groups_per_task =
      n_tokens <= 4 ? std::max<int64_t>(1, ceil_div(n_groups, 8 * static_cast<int64_t>(n_threads)))
                    : std::max<int64_t>(1, std::min<int64_t>(8, ceil_div(n_groups, 4 * n_threads)));
  const int64_t n_group_tasks = ceil_div(n_groups, groups_per_task);
  const int64_t want_token_tasks = ceil_div(4 * static_cast<int64_t>(n_threads), n_group_tasks);
  const int64_t n_token_tasks =
      std::clamp<int64_t>(want_token_tasks, 1, std::max<int64_t>(1, n_tokens / 32));
  const int64_t tokens_per_task = round_up(ceil_div(n_tokens, n_token_tasks), 4);
  // Decoding and calls whose tokens are one task: guided tasks (internal::GuidedTasks), as the
  // 16-row layout's PackedMatmul.
  const internal::GroupTokenTasks tasks(n_groups, n_tokens, n_threads, groups_per_task,
                                        n_token_tasks, tokens_per_task);
  internal::parallel_for(a.pool, tasks.n_tasks(), [&](int64_t task, int) {
    int64_t g0, g1, t0, t1;
    tasks.range(task, &g0, &g1, &t0, &t1);
    for (int64_t g = g0; g < g1; ++g) {
      const int n_valid = static_cast<int>(std::min<int64_t>(8, a.n_out - 8 * g));
      const uint8_t* group = data + g * group_bytes;
      for (int64_t t = t0; t < t1; t += 4) {
        const int nc = static_cast<int>(std::min<int64_t>(4, t1 - t));
        const int8_t* ap[4];
        const float* dxp[4];
        const float* sxp[4];
        for (int c = 0; c < nc; ++c) {
          ap[c] = acts.q + (t + c) * n_pad;
          dxp[c] = acts.dx + (t + c) * n_sub;
          sxp[c] = acts.sx + (t + c) * n_sub;
        }
        tiles.fn[nc - 1](group, n_sub, ap, dxp, sxp, a.y + t * a.y_stride + 8 * g, a.y_stride,
                         n_valid);
      }
    }
  });
}

}  // namespace p8

#endif  // MNEMO_HAVE_PACKED256

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_PACKED256_INL_H_
