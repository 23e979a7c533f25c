// Attention's direct kernels, per Highway target: scores and V accumulation that read K/V cache
// rows in place in their type (F32 / F16 / BF16, and Q8_0 on AVX2) instead of unpacking them
// first. Included by attention-inl.h (toggle guard below). Each computes an output element with
// exactly the operations of the unpacked path it replaces (batch-invariant numerics,
// docs/numerics.md), so the two can serve different calls of one configuration only where the
// choice depends on the configuration (type, head size, target), never on the batch.

#if defined(MNEMO_KERNELS_ATTENTION_DIRECT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_ATTENTION_DIRECT_INL_H_
#undef MNEMO_KERNELS_ATTENTION_DIRECT_INL_H_
#else
#define MNEMO_KERNELS_ATTENTION_DIRECT_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/matmul-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"
#include "quant/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {
namespace attn_detail {

/// Whether float-type rows (F32 / F16 / BF16) and Q8_0 V rows are read in place by the direct
/// kernels below (no unpacked copy).
inline bool IsDirectFloat(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

/// nf elements of a float-type row at element i, widened to f32.
template <GgmlType kType>
HWY_INLINE hn::Vec<hn::ScalableTag<float>> Widen(const uint8_t* row, int64_t i) {
  const hn::ScalableTag<float> df;
  if constexpr (kType == GgmlType::F32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == GgmlType::F16) {
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    const hn::Rebind<hwy::bfloat16_t, decltype(df)> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  }
}

/// Cells ahead of the group being scored whose K lines are fetched into L1 (T0) and into L2
/// (T2), one line of each at a time between the group's vectors (a burst of whole rows would
/// hold the core's fill buffers and stall it). One core's reads are bound by its lines in
/// flight; the far fetch keeps more of them in flight (docs/benchmarks.md). 64 cells (32 KiB of a
/// 1.5B model's K rows) ahead: with the rows coming from memory rather than the last-level
/// cache, 16 left the memory idle part of the time.
inline constexpr int64_t kScoreAheadL1 = 4;
inline constexpr int64_t kScoreAheadL2 = 64;

/// Scores of kQ query rows qf[r] (float, hd elements) against kC float-type K rows (cells;
/// repeats past n_cells are computed and dropped): y[r * y_stride + j]. Per (row, cell) the same
/// operations as FloatTile over unpacked rows: lane chains acc = fma(k_i, q_i, acc) over i in
/// vectors, then the Reduce4 tree, whose result for a vector does not depend on the three others
/// reduced with it (each output lane adds its own vector's lanes in the same order), so with
/// kC = 2 one tree serves two rows. hd is a multiple of the vector length. pf0 / pf2 (null:
/// none): kC rows whose bytes read here (the same offsets) are fetched into L1 / L2, a line per
/// row at each line start.
template <GgmlType kType, int kQ, int kC>
HWY_INLINE void FloatScoresGroup(const uint8_t* const* cells, int n_cells, int64_t hd,
                                 const float* const* qf, float* y, int64_t y_stride,
                                 const uint8_t* const* pf0, const uint8_t* const* pf2) {
  static_assert(kC == 2 || kC == 4);
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kElem = kType == GgmlType::F32 ? 4 : 2;
  hn::Vec<decltype(df)> acc[kQ][kC];
#pragma GCC unroll 8
  for (int r = 0; r < kQ; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) acc[r][j] = hn::Zero(df);
  }
  for (int64_t i = 0; i < hd; i += nf) {
    if (((i * kElem) & 63) == 0) {
      if (pf0 != nullptr) {
#pragma GCC unroll 4
        for (int j = 0; j < kC; ++j) hwy::Prefetch(pf0[j] + i * kElem);
      }
      if (pf2 != nullptr) {
#pragma GCC unroll 4
        for (int j = 0; j < kC; ++j) {
          _mm_prefetch(reinterpret_cast<const char*>(pf2[j] + i * kElem), _MM_HINT_T2);
        }
      }
    }
    hn::Vec<decltype(df)> k[kC];
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) k[j] = Widen<kType>(cells[j], i);
#pragma GCC unroll 8
    for (int r = 0; r < kQ; ++r) {
      auto qv = hn::LoadU(df, qf[r] + i);
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4
      // One load per query vector: GCC would fold it into each of the kC multiply-adds as a
      // memory operand, and the loads (not the multiply-adds) would bound the loop.
      if constexpr (kC == 2) {
        auto raw = qv.raw;  // a plain local: clang takes no member as an asm operand
        asm("" : "+x"(raw));
        qv.raw = raw;
      }
#endif
#pragma GCC unroll 8
      for (int j = 0; j < kC; ++j) acc[r][j] = hn::MulAdd(k[j], qv, acc[r][j]);
    }
  }
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kC == 4) {
#pragma GCC unroll 8
    for (int r = 0; r < kQ; ++r) {
      // Four cells (all but a span's last group) store in place: a copy of n_cells floats
      // would be a library call per row.
      if (n_cells == 4) {
        Reduce4(df, acc[r][0], acc[r][1], acc[r][2], acc[r][3], y + r * y_stride);
        continue;
      }
      float tmp[4];
      Reduce4(df, acc[r][0], acc[r][1], acc[r][2], acc[r][3], tmp);
      for (int j = 0; j < n_cells; ++j) y[r * y_stride + j] = tmp[j];
    }
  } else {
    // Two rows' two cells per tree (a last odd row twice).
#pragma GCC unroll 8
    for (int r = 0; r < kQ; r += 2) {
      const int r1 = std::min(r + 1, kQ - 1);
      float tmp[4];
      Reduce4(df, acc[r][0], acc[r][1], acc[r1][0], acc[r1][1], tmp);
      y[r * y_stride] = tmp[0];
      if (n_cells == 2) y[r * y_stride + 1] = tmp[1];
      if (r + 1 < kQ) {
        y[(r + 1) * y_stride] = tmp[2];
        if (n_cells == 2) y[(r + 1) * y_stride + 1] = tmp[3];
      }
    }
  }
#else
  for (int r = 0; r < kQ; ++r) {
    for (int j = 0; j < n_cells; ++j) y[r * y_stride + j] = ReduceSum(df, acc[r][j]);
  }
#endif
}

/// Query rows per pass of the score kernel and cells per group: the accumulators, the K vectors
/// and a query vector fit the register file. AVX-512: 6 rows x 4 cells (24 + 4 + 1 of 32). AVX2:
/// 6 rows x 2 cells (12 + 2 + 1 of 16); 3 rows x 4 cells needs 17, and the accumulator the
/// compiler then keeps in memory chains every step through a store and a load (a third slower
/// on the Zen 4, docs/benchmarks.md).
inline constexpr int kScoreRowsMax = 6;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SCALAR
inline constexpr int kScoreCells = 4;
#else
inline constexpr int kScoreCells = 2;
#endif

/// FloatScoresGroup over the cells act[0, n_act) for n_heads K/V heads at once, in n_pass
/// passes of kQ query rows: head g's segment of cell j starts at kbase + j * k_stride + g *
/// head_bytes, pass i's query rows of head g are qf[(i * n_heads + g) * kQ, ... + kQ) and its
/// scores go to y[g][(i * kQ + r) * y_stride + k] (r < kQ, k < n_act). Cells go in groups of
/// kScoreCells (the last group repeats its last cell, dropped), every head and every pass per
/// group, so that whole K rows are read once, in memory order; the segments read of the cells
/// kScoreAheadL1 and kScoreAheadL2 further on are fetched ahead while they are below n_pf (n_pf
/// 0: none).
template <GgmlType kType, int kQ>
HWY_NOINLINE void FloatScoresSpan(const uint8_t* kbase, int64_t k_stride, int64_t n_heads,
                                  int64_t head_bytes, const int32_t* act, int64_t n_act,
                                  int64_t n_pf, int64_t hd, const float* const* qf, int n_pass,
                                  float* const* y, int64_t y_stride) {
  constexpr int kC = kScoreCells;
  for (int64_t k = 0; k < n_act; k += kC) {
    const uint8_t* rows[kC];
    const uint8_t* ahead0[kC];
    const uint8_t* ahead2[kC];
    const int n_cells = static_cast<int>(std::min<int64_t>(kC, n_act - k));
#pragma GCC unroll 4
    for (int j = 0; j < kC; ++j) rows[j] = kbase + act[k + std::min(j, n_cells - 1)] * k_stride;
    // K rows are read at the cache-row stride: fetch ahead, whole groups only.
    const bool fetch0 = k + kScoreAheadL1 + kC <= n_pf;
    const bool fetch2 = k + kScoreAheadL2 + kC <= n_pf;
#pragma GCC unroll 4
    for (int j = 0; j < kC; ++j) {
      ahead0[j] = fetch0 ? kbase + act[k + kScoreAheadL1 + j] * k_stride : nullptr;
      ahead2[j] = fetch2 ? kbase + act[k + kScoreAheadL2 + j] * k_stride : nullptr;
    }
    for (int64_t g = 0; g < n_heads; ++g) {
      const uint8_t* cells[kC];
      const uint8_t* pf0[kC];
      const uint8_t* pf2[kC];
#pragma GCC unroll 4
      for (int j = 0; j < kC; ++j) {
        cells[j] = rows[j] + g * head_bytes;
        pf0[j] = ahead0[j] + g * head_bytes;
        pf2[j] = ahead2[j] + g * head_bytes;
      }
      for (int i = 0; i < n_pass; ++i) {
        // The later passes find the group's rows in L1.
        FloatScoresGroup<kType, kQ, kC>(
            cells, n_cells, hd, qf + (i * n_heads + g) * kQ, y[g] + i * kQ * y_stride + k, y_stride,
            fetch0 && i == 0 ? pf0 : nullptr, fetch2 && i == 0 ? pf2 : nullptr);
      }
    }
  }
}

#if HWY_TARGET == HWY_AVX2 && MNEMO_INT_DOT
/// AVX2, Q8_0 K read in place: scores of kQ query rows (quantized to 8 bits per 32, scales dx)
/// against kC cells (repeats past n_cells are dropped): y[r * y_stride + j]. One 32-element block
/// is one vector here, so per (row, cell) these are exactly IntTile's operations on the unpacked
/// rows: acc = fma(float(dot4(w, a)), d_block * dx_block, acc) per block, then Reduce4.
template <int kQ, int kC>
HWY_NOINLINE void Q8Scores(const uint8_t* const* cells, int n_cells, int64_t hd,
                           const int8_t* const* q8, const float* const* dx, float* y,
                           int64_t y_stride) {
  const DF32 df;
  hn::Vec<DF32> acc[kQ][kC];
#pragma GCC unroll 8
  for (int r = 0; r < kQ; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) acc[r][j] = hn::Zero(df);
  }
  for (int64_t b = 0; b < hd / 32; ++b) {
    __m256i w[kC], wabs[kC];
    float d[kC];
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) {
      const block_q8_0* blk = reinterpret_cast<const block_q8_0*>(cells[j]) + b;
      w[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
      wabs[j] = _mm256_sign_epi8(w[j], w[j]);
      d[j] = F16ToF32(blk->d);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kQ; ++r) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8[r] + 32 * b));
      const float dxr = dx[r][8 * b];
#pragma GCC unroll 8
      for (int j = 0; j < kC; ++j) {
        // DotQuads<true>: the sign trick, then maddubs + madd.
        const __m256i dot = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wabs[j], _mm256_sign_epi8(a, w[j])), _mm256_set1_epi16(1));
        acc[r][j] =
            hn::MulAdd(hn::ConvertTo(df, hn::Vec<DI32>{dot}), hn::Set(df, d[j] * dxr), acc[r][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kQ; ++r) {
    float tmp[4];
    Reduce4(df, acc[r][0], acc[r][std::min(1, kC - 1)], acc[r][std::min(2, kC - 1)],
            acc[r][std::min(3, kC - 1)], tmp);
    if (n_cells == 4) {
      std::memcpy(y + r * y_stride, tmp, sizeof(tmp));
      continue;
    }
    for (int j = 0; j < n_cells; ++j) y[r * y_stride + j] = tmp[j];
  }
}
#endif

/// Query rows per pass of the V kernel (and at most of the score kernel: kScoreRowsMax): one
/// K/V head's rows of a token under GQA up to 6, so that each V row loaded serves all of them.
inline constexpr int kDirectRows = 6;

/// V accumulation: vectors of output dimensions per call, so that the kDirectRows x kVVecs
/// accumulators, kVVecs V vectors and a broadcast weight fit the register file (AVX-512:
/// 24 + 4 + 1 of 32; AVX2: 12 + 2 + 1 of 16).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SCALAR
inline constexpr int kVVecs = 4;
#else
inline constexpr int kVVecs = 2;
#endif

/// Rows per pass when n_rows rows are split into as few passes of at most max_rows as possible,
/// as evenly as possible (7 rows: 4 + 3, not 6 + 1), so that each K or V row loaded serves as
/// many query rows as the registers allow.
inline int64_t RowsPerPass(int64_t n_rows, int64_t max_rows = kDirectRows) {
  const int64_t n_pass = (n_rows + max_rows - 1) / max_rows;
  return (n_rows + n_pass - 1) / std::max<int64_t>(1, n_pass);
}

/// FloatScoresSpan for n_q (at most kScoreRowsMax) rows per pass.
template <GgmlType kType>
void FloatScoresRows(const uint8_t* kbase, int64_t k_stride, int64_t n_heads, int64_t head_bytes,
                     const int32_t* act, int64_t n_act, int64_t n_pf, int64_t hd,
                     const float* const* qf, int n_q, int n_pass, float* const* y,
                     int64_t y_stride) {
#define MNEMO_SCORES_SPAN(Q)                                                                \
  FloatScoresSpan<kType, Q>(kbase, k_stride, n_heads, head_bytes, act, n_act, n_pf, hd, qf, \
                            n_pass, y, y_stride)
  switch (n_q) {
    case 1:
      return MNEMO_SCORES_SPAN(1);
    case 2:
      return MNEMO_SCORES_SPAN(2);
    case 3:
      return MNEMO_SCORES_SPAN(3);
    case 4:
      return MNEMO_SCORES_SPAN(4);
    case 5:
      return MNEMO_SCORES_SPAN(5);
    case 6:
      return MNEMO_SCORES_SPAN(6);
    default:
      CHECK(false) << "bad row count " << n_q;
  }
#undef MNEMO_SCORES_SPAN
}

/// kV vectors of dimensions [d, d + kV nf) of a V row, as float: F32 / F16 / BF16 widened; for
/// Q8_0 the quants as float (the block scale is applied to the weight instead: VAcc).
template <GgmlType kType, int kV>
HWY_INLINE void LoadV(const uint8_t* row, int64_t d, hn::Vec<hn::ScalableTag<float>> (&v)[kV]) {
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  if constexpr (kType == GgmlType::Q8_0) {
    const hn::Rebind<int32_t, decltype(df)> di;
    const hn::Rebind<int8_t, decltype(df)> d8;
    const block_q8_0* blocks = reinterpret_cast<const block_q8_0*>(row);
#pragma GCC unroll 8
    for (int j = 0; j < kV; ++j) {
      const int64_t e = d + j * nf;
      v[j] = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, blocks[e / 32].qs + e % 32)));
    }
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < kV; ++j) v[j] = Widen<kType>(row, d + j * nf);
  }
}

/// For rows r < kQ: acc_r[j nf, (j + 1) nf) over j < kV, chained over the cells k < n in order:
/// acc = fma(w, v_k, acc), v_k = dimensions [d, d + kV nf) of V row rows[k], w = p_r[k] (for
/// Q8_0: w = p_r[k] * d_block and v_k the quants); and, when l is given, l[r] += p_r[k] in the
/// same order. Every schedule accumulates V through this function (or, for the other V types,
/// AccumulateV with the same operations). Prefetch: bytes [pf0, pf1) of pf_rows[j], j < n_pf,
/// row j while row j * pf_every is read (none when pf1 <= pf0): the caller points pf_rows at
/// rows it reads later and spreads them over its calls.
template <GgmlType kType, int kQ, int kV, bool kL>
HWY_NOINLINE void VAcc(const uint8_t* const* rows, int64_t n, int64_t d, const float* const* p,
                       float* const* acc, float* l, const uint8_t* const* pf_rows, int64_t n_pf,
                       int64_t pf_every, int64_t pf0, int64_t pf1) {
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  // Q8_0: whether the kV vectors lie in one 32-element block (one scale).
  constexpr bool kOneBlock = kV * static_cast<int64_t>(hn::MaxLanes(df)) <= 32;
  hn::Vec<decltype(df)> a[kQ][kV];
  float ls[kQ];
#pragma GCC unroll 8
  for (int r = 0; r < kQ; ++r) {
    ls[r] = kL ? l[r] : 0.0f;
#pragma GCC unroll 8
    for (int j = 0; j < kV; ++j) a[r][j] = hn::LoadU(df, acc[r] + j * nf);
  }
  // V rows are read at the cache-row stride: fetch the caller's byte range of its later rows.
  if (pf1 <= pf0) n_pf = 0;
  for (int64_t k = 0, j = 0, next = 0; k < n; ++k) {
    if (k == next && j < n_pf) {
      const uint8_t* ahead = pf_rows[j++];
      next += pf_every;
      for (int64_t b = pf0; b < pf1; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T1);
      }
      _mm_prefetch(reinterpret_cast<const char*>(ahead + pf1 - 1), _MM_HINT_T1);
    }
    hn::Vec<decltype(df)> v[kV];
    LoadV<kType, kV>(rows[k], d, v);
    float sc[kV];
    if constexpr (kType == GgmlType::Q8_0) {
      const block_q8_0* blocks = reinterpret_cast<const block_q8_0*>(rows[k]);
#pragma GCC unroll 8
      for (int j = 0; j < kV; ++j) sc[j] = F16ToF32(blocks[(d + j * nf) / 32].d);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kQ; ++r) {
      const float pk = p[r][k];
      if constexpr (kL) ls[r] += pk;
      if constexpr (kType == GgmlType::Q8_0 && kOneBlock) {
        const auto w = hn::Set(df, pk * sc[0]);
#pragma GCC unroll 8
        for (int j = 0; j < kV; ++j) a[r][j] = hn::MulAdd(w, v[j], a[r][j]);
      } else if constexpr (kType == GgmlType::Q8_0) {
#pragma GCC unroll 8
        for (int j = 0; j < kV; ++j) a[r][j] = hn::MulAdd(hn::Set(df, pk * sc[j]), v[j], a[r][j]);
      } else {
        const auto w = hn::Set(df, pk);
#pragma GCC unroll 8
        for (int j = 0; j < kV; ++j) a[r][j] = hn::MulAdd(w, v[j], a[r][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kQ; ++r) {
    if constexpr (kL) l[r] = ls[r];
#pragma GCC unroll 8
    for (int j = 0; j < kV; ++j) hn::StoreU(a[r][j], df, acc[r] + j * nf);
  }
}

template <GgmlType kType, int kQ, bool kL>
void VAccVecsL(int n_vec, const uint8_t* const* rows, int64_t n, int64_t d, const float* const* p,
               float* const* acc, float* l, const uint8_t* const* pf_rows, int64_t n_pf,
               int64_t pf_every, int64_t pf0, int64_t pf1) {
  switch (n_vec) {
    case 1:
      return VAcc<kType, kQ, 1, kL>(rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 2:
      return VAcc<kType, kQ, 2, kL>(rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    default:
      if constexpr (kVVecs >= 4) {
        if (n_vec == 3)
          return VAcc<kType, kQ, 3, kL>(rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
        return VAcc<kType, kQ, 4, kL>(rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
      }
      CHECK(false) << "bad vector count " << n_vec;
  }
}

/// VAcc with l summed (l given) or not (null).
template <GgmlType kType, int kQ>
void VAccVecs(int n_vec, const uint8_t* const* rows, int64_t n, int64_t d, const float* const* p,
              float* const* acc, float* l, const uint8_t* const* pf_rows, int64_t n_pf,
              int64_t pf_every, int64_t pf0, int64_t pf1) {
  if (l != nullptr)
    return VAccVecsL<kType, kQ, true>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0,
                                      pf1);
  return VAccVecsL<kType, kQ, false>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0,
                                     pf1);
}

template <GgmlType kType>
void VAccRows(int n_q, int n_vec, const uint8_t* const* rows, int64_t n, int64_t d,
              const float* const* p, float* const* acc, float* l, const uint8_t* const* pf_rows,
              int64_t n_pf, int64_t pf_every, int64_t pf0, int64_t pf1) {
  switch (n_q) {
    case 1:
      return VAccVecs<kType, 1>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 2:
      return VAccVecs<kType, 2>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 3:
      return VAccVecs<kType, 3>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 4:
      return VAccVecs<kType, 4>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 5:
      return VAccVecs<kType, 5>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    case 6:
      return VAccVecs<kType, 6>(n_vec, rows, n, d, p, acc, l, pf_rows, n_pf, pf_every, pf0, pf1);
    default:
      CHECK(false) << "bad row count " << n_q;
  }
}

using FloatScoresFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, const int32_t*, int64_t,
                               int64_t, int64_t, const float* const*, int, int, float* const*,
                               int64_t);
using VAccFn = void (*)(int, int, const uint8_t* const*, int64_t, int64_t, const float* const*,
                        float* const*, float*, const uint8_t* const*, int64_t, int64_t, int64_t,
                        int64_t);

inline FloatScoresFn GetFloatScores(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return &FloatScoresRows<GgmlType::F32>;
    case GgmlType::F16:
      return &FloatScoresRows<GgmlType::F16>;
    case GgmlType::BF16:
      return &FloatScoresRows<GgmlType::BF16>;
    default:
      return nullptr;
  }
}

inline VAccFn GetVAcc(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return &VAccRows<GgmlType::F32>;
    case GgmlType::F16:
      return &VAccRows<GgmlType::F16>;
    case GgmlType::BF16:
      return &VAccRows<GgmlType::BF16>;
    case GgmlType::Q8_0:
      return &VAccRows<GgmlType::Q8_0>;
    default:
      return nullptr;
  }
}

}  // namespace attn_detail
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_ATTENTION_DIRECT_INL_H_
