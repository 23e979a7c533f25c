// Per-target attention over KV-cache rows, K and V read in their cache type. Included (through
// foreach_target.h) only by attention.cc; toggle guard below.
//
// The arithmetic of one output row (a query token and head) is fixed by the cells it sees and
// their visiting order (KvView::order: by position), never by the other rows of the call, the
// ubatch size, the cache layout or the thread split (batch-invariant numerics,
// docs/numerics.md). With c_0, c_1, ... the row's visible cells in visiting order:
//   1. s_k = softcap(scale * q . k_{c_k}) + mask; each dot product in the matmul micro-kernels
//      (IntTile for quantized K with Q quantized to 8 bits per 32, FloatTile otherwise), whose
//      per-element arithmetic does not depend on the tile;
//   2. m = max_k s_k (exact), p_k = exp(s_k - m) (elementwise);
//   3. l = p_0 + p_1 + ... and acc[d] = fma(p_k, v_{c_k}[d], acc[d]), each one sequential chain
//      from 0 in visiting order, V dequantized exactly to float (q8_0 V: fma(p_k * d_block, q,
//      acc), the block scale applied to the weight);
//   4. out[d] = acc[d] * (1 / l).
// Cells a row does not see either are skipped or enter with p = 0, which adds exactly nothing.
// Two schedules compute this:
//   - tasks of one K/V head x a chunk of query tokens (prompts): the task lists the cells some
//     token of the chunk sees, scores them all (K rows unpacked once per tile of kCellTile cells
//     and shared by the chunk's rows), then accumulates V tile by tile;
//   - for few such tasks (decoding, a speculative verify batch) three phases: scores over
//     ranges of cells, every K/V head of a range in one task (whole K rows, in memory order),
//     into a call-wide matrix; each row's weights (computed by the V task of the row when V
//     tasks take whole head rows); V over whole head rows (split into output ranges only to give
//     every thread a task), each task summing l for its rows as it goes.

#if defined(MNEMO_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_ATTENTION_INL_H_
#undef MNEMO_KERNELS_ATTENTION_INL_H_
#else
#define MNEMO_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/attention_direct-inl.h"
#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "kernels/matmul-inl.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "quant/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

namespace attn_detail {

using internal::ceil_div;
using internal::kPadElems;
using internal::round_up;

/// Cells per tile: the scores of a tile ([rows x kCellTile]) and its unpacked K / dequantized V
/// rows stay in L1 / L2.
inline constexpr int64_t kCellTile = 64;
/// Query rows per task (tokens x heads of one group) in the prompt path.
inline constexpr int64_t kRowsPerTask = 32;
/// Cell ranges: calls with fewer (head, token-chunk) tasks than this (decoding) also split the
/// cells into up to kMaxSplits ranges of at least kMinCellsPerSplit cells (128: a 1024-cell
/// sliding-window cache still gives 8 ranges to balance over the threads).
inline constexpr int64_t kSplitBelowTasks = 16;
inline constexpr int64_t kMinCellsPerSplit = 128;
inline constexpr int64_t kMaxSplits = 16;
/// Cell ranges per thread at most (and kMaxSplits in all): a range's first cells start cold
/// (nothing fetched them ahead), so fewer, longer ranges keep the memory busier; two per thread
/// leave the threads room to balance.
inline constexpr int64_t kSplitsPerThread = 2;

/// K/V head g's V segment of cell 0 (KvView: heads side by side in a row, or V planes).
inline const uint8_t* VHead(const KvView& kv, int64_t g, int64_t hd) {
  const uint8_t* v = static_cast<const uint8_t*>(kv.v);
  return kv.v_head_stride == 0 ? v + row_size(kv.v_type, g * hd) : v + g * kv.v_head_stride;
}

/// How one K or V head segment becomes dot-ready / float.
struct RowCodec {
  GgmlType type = GgmlType::F32;
  bool use_int = false;  // K only: integer scores
#if MNEMO_INT_DOT
  IntKernel ik;
#endif
  FloatUnpackFn fu = nullptr;
};

inline RowCodec MakeCodec(GgmlType type, bool allow_int) {
  RowCodec c;
  c.type = type;
#if MNEMO_INT_DOT
  if (GetIntKernel(type, &c.ik)) {
    c.use_int = allow_int;
    return c;
  }
#endif
  (void)allow_int;
  c.fu = GetFloatUnpack(type);
  return c;
}

/// Carves 64-byte aligned regions out of one scratch buffer.
class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <class T>
  T* take(int64_t n) {
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += round_up(static_cast<int64_t>(n * sizeof(T)), 64);
    return p;
  }

 private:
  uint8_t* base_;
  int64_t used_ = 0;
};

}  // namespace attn_detail

/// Dequantizes one head segment of a V row to float: n elements -> out[n_pad] (zero tail).
/// tmp8 / tmpf: scratch for the unpacked form (n_pad bytes, n_pad / 4 + n_pad floats).
HWY_INLINE void DequantSegment(const attn_detail::RowCodec& codec, const uint8_t* seg, int64_t n,
                               int64_t n_pad, float* out, uint8_t* tmp8, float* tmpf) {
  if (codec.type == GgmlType::Q8_0) return DequantQ8_0Direct(seg, n, n_pad, out);
#if MNEMO_INT_DOT
  if (codec.fu == nullptr) {
    const int group = codec.ik.format.group;
    const int64_t n_off = OffsetLen(n_pad, group);
    float* dw = tmpf;
    float* cw = tmpf + n_pad / 4;
    codec.ik.unpack(seg, n, n_pad, n_off, tmp8, dw, cw);
    if (codec.ik.format.is_signed) {
      DequantUnpacked<true>(tmp8, dw, cw, group, n_pad, out);
    } else {
      DequantUnpacked<false>(tmp8, dw, cw, group, n_pad, out);
    }
    return;
  }
#endif
  (void)tmp8;
  (void)tmpf;
  codec.fu(codec.type, seg, n, n_pad, out);
}

namespace attn_detail {

/// What one call shares with its tasks.
struct Call {
  AttentionParams p;
  KvView kv;
  const float* mask = nullptr;
  int64_t mask_stride = 0;
  int64_t hd = 0, hd_pad = 0, gqa = 0;
  RowCodec kc, vc;
  const int32_t* cells = nullptr;  // the visiting order: cells[j], j < n_cells
  int64_t n_cells = 0;
  int64_t n_off = 0;
#if MNEMO_INT_DOT
  QuantRows qr;  // Q quantized (integer K scores)
#endif
  const float* qf = nullptr;       // Q padded to hd_pad (float K scores)
  FloatScoresFn fscore = nullptr;  // direct float-K scores (null: unpack + FloatTile)
  VAccFn vacc = nullptr;           // direct V accumulation (null: dequantize + AccumulateV)
};

/// Scratch for the K rows of one tile of cells in the form the score tiles read.
struct KScratch {
  uint8_t* k8 = nullptr;
  float* kdw = nullptr;
  float* kcw = nullptr;
  float* kf = nullptr;
};

inline int64_t KScratchBytes(const Call& c) {
  return c.kc.use_int ? kCellTile * (2 * c.hd_pad + 4 * c.n_off) + 3 * 64
                      : 4 * kCellTile * c.hd_pad + 64;
}

inline KScratch TakeKScratch(const Call& c, Carver& carver) {
  KScratch ks;
  if (c.kc.use_int) {
    ks.k8 = carver.take<uint8_t>(kCellTile * c.hd_pad);
    ks.kdw = carver.take<float>(kCellTile * c.hd_pad / 4);
    ks.kcw = carver.take<float>(std::max<int64_t>(1, kCellTile * c.n_off));
  } else {
    ks.kf = carver.take<float>(kCellTile * c.hd_pad);
  }
  return ks;
}

/// Growable per-thread buffers of the attention call (contents undefined on entry).
inline std::vector<int32_t>& ActScratch() {
  thread_local std::vector<int32_t> v;
  return v;
}
inline std::vector<int32_t>& TaskActScratch() {
  thread_local std::vector<int32_t> v;
  return v;
}
inline std::vector<float>& ScoreScratch() {
  thread_local std::vector<float> v;
  return v;
}

/// Whether some token in [t0, t1) may attend to `cell`.
HWY_INLINE bool VisibleToAny(const Call& c, int64_t t0, int64_t t1, int32_t cell) {
  if (c.mask == nullptr) return true;
  for (int64_t t = t0; t < t1; ++t) {
    if (c.mask[t * c.mask_stride + cell] != -INFINITY) return true;
  }
  return false;
}

/// The elementwise part of a tile's scores: s[i * s_stride + k] = softcap(scale * s[..]) +
/// mask[token of row i][act[k]] for i < n_rows, k < n_act.
inline void ScaleMaskTile(const Call& c, const int64_t* qrows, int64_t n_rows, const int32_t* act,
                          int64_t n_act, float* s, int64_t s_stride) {
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  const auto vscale = hn::Set(df, c.p.scale);
  // Consecutive cells (the usual case) read the mask a vector at a time: the vectors whole
  // inside the tile add it in the same pass (the same two roundings: product, then sum).
  bool consecutive = c.mask != nullptr;
  for (int64_t k = 1; k < n_act && consecutive; ++k) consecutive = act[k] == act[0] + k;
  const int64_t n_vec_mask = consecutive ? n_act / nf * nf : 0;
  for (int64_t i = 0; i < n_rows; ++i) {
    float* si = s + i * s_stride;
    const float* mrow =
        c.mask != nullptr ? c.mask + (qrows[i] / c.p.n_head) * c.mask_stride : nullptr;
    for (int64_t k = 0; k < n_act; k += nf) {
      auto v = hn::Mul(hn::LoadU(df, si + k), vscale);
      if (c.p.softcap > 0.0f) {
        v = hn::Mul(hn::Set(df, c.p.softcap),
                    hn::Tanh(df, hn::Mul(v, hn::Set(df, 1.0f / c.p.softcap))));
      }
      if (k < n_vec_mask) v = hn::Add(v, hn::LoadU(df, mrow + act[0] + k));
      hn::StoreU(v, df, si + k);
    }
    if (mrow != nullptr) {
      for (int64_t k = n_vec_mask; k < n_act; ++k) si[k] += mrow[act[k]];
    }
  }
}

/// Scores of the query rows qrows[0, n_rows) (row indexes into Q: token * n_head + head; all of
/// K/V head g) against the cells act[0, n_act), n_act <= kCellTile:
///   s[i * s_stride + k] = softcap(scale * q_i . k_{act[k]}) + mask[token of i][act[k]]
/// (-inf where masked). The value of one (row, cell) does not depend on the other rows and cells
/// of the call: the dot products run in the matmul micro-kernels, whose per-element arithmetic
/// is fixed, and everything after is elementwise. act[n_act, n_pf) are cells read next: their
/// rows are fetched ahead.
inline void ScoreTile(const Call& c, int64_t g, const int64_t* qrows, int64_t n_rows,
                      const int32_t* act, int64_t n_act, int64_t n_pf, const KScratch& ks, float* s,
                      int64_t s_stride) {
  const int64_t hd = c.hd, hd_pad = c.hd_pad;
  const uint8_t* kbase = static_cast<const uint8_t*>(c.kv.k) + row_size(c.kv.k_type, g * hd);
#if HWY_TARGET == HWY_AVX2 && MNEMO_INT_DOT
  if (c.kc.use_int && c.kv.k_type == GgmlType::Q8_0) {
    // Cells in fours, query rows in pairs: accumulators and K blocks fit 16 registers.
    const size_t k_seg_bytes = row_size(c.kv.k_type, hd);
    for (int64_t k = 0; k < n_act; k += 4) {
      const uint8_t* cells[4];
      const int n_cells = static_cast<int>(std::min<int64_t>(4, n_act - k));
      for (int j = 0; j < 4; ++j)
        cells[j] = kbase + act[k + std::min(j, n_cells - 1)] * c.kv.k_stride;
      for (int64_t j = k + 16; j < std::min(n_pf, k + 20); ++j) {  // strided rows: fetch ahead
        const uint8_t* row = kbase + act[j] * c.kv.k_stride;
        for (size_t b = 0; b < k_seg_bytes; b += 64) hwy::Prefetch(row + b);
      }
      for (int64_t i = 0; i < n_rows; i += 2) {
        const int n_q = static_cast<int>(std::min<int64_t>(2, n_rows - i));
        const int8_t* qp[2];
        const float* dxp[2];
        for (int r = 0; r < n_q; ++r) {
          qp[r] = c.qr.q + qrows[i + r] * hd_pad;
          dxp[r] = c.qr.dx + qrows[i + r] * (hd_pad / 4);
        }
        float* y = s + i * s_stride + k;
        if (n_q == 2) {
          Q8Scores<2, 4>(cells, n_cells, hd, qp, dxp, y, s_stride);
        } else {
          Q8Scores<1, 4>(cells, n_cells, hd, qp, dxp, y, s_stride);
        }
      }
    }
  } else
#endif
      if (c.kc.use_int) {
#if MNEMO_INT_DOT
    const size_t k_seg_bytes = row_size(c.kv.k_type, hd);
    for (int64_t k = 0; k < n_act; ++k) {
      if (k + 8 < n_pf) {  // rows at the cache-row stride: fetch ahead
        const uint8_t* ahead = kbase + act[k + 8] * c.kv.k_stride;
        for (size_t b = 0; b < k_seg_bytes; b += 64) hwy::Prefetch(ahead + b);
      }
      c.kc.ik.unpack(kbase + act[k] * c.kv.k_stride, hd, hd_pad, c.n_off, ks.k8 + k * hd_pad,
                     ks.kdw + k * (hd_pad / 4), ks.kcw + k * c.n_off);
    }
    IntTileArgs ta;
    ta.n_pad = hd_pad;
    ta.n_off = c.n_off;
    ta.y_stride = s_stride;
    for (int64_t k = 0; k < n_act; k += kTileRows) {
      ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, n_act - k));
      for (int j = 0; j < kTileRows; ++j) {
        const int64_t kj = std::min<int64_t>(k + j, n_act - 1);
        ta.w[j] = ks.k8 + kj * hd_pad;
        ta.dw[j] = ks.kdw + kj * (hd_pad / 4);
        ta.cw[j] = ks.kcw + kj * c.n_off;
      }
      for (int64_t i = 0; i < n_rows; i += kTileCols) {
        ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, n_rows - i));
        for (int j = 0; j < kTileCols; ++j) {
          const int64_t qrow = qrows[std::min<int64_t>(i + j, n_rows - 1)];
          ta.a[j] = c.qr.q + qrow * hd_pad;
          ta.dx[j] = c.qr.dx + qrow * (hd_pad / 4);
          ta.sx[j] = c.qr.sx + qrow * c.n_off;
        }
        ta.y = s + i * s_stride + k;
        IntTile(ta, c.kc.ik.format.is_signed);
      }
    }
#endif
  } else if (c.fscore != nullptr) {
    // The first call's passes of whole rows go group of cells by group (each K row read once,
    // fetched ahead); the rows left (a shorter last pass, or the passes past kMaxPtrs rows when
    // the group is that large) go over the tile again, a pass per call, and find its rows in
    // the cache. kMaxPtrs covers kRowsPerTask rows, so that is one call for most tasks.
    const int64_t per_pass = RowsPerPass(n_rows, kScoreRowsMax);
    const int64_t n_full = n_rows / per_pass;
    for (int64_t i = 0; i < n_rows;) {
      const int n_q = static_cast<int>(std::min<int64_t>(per_pass, n_rows - i));
      constexpr int64_t kMaxPtrs = 6 * kDirectRows;
      static_assert(kMaxPtrs >= kRowsPerTask);
      const int n_pass = static_cast<int>(i == 0 ? std::min<int64_t>(n_full, kMaxPtrs / n_q) : 1);
      const float* qp[kMaxPtrs];
      for (int64_t r = 0; r < n_pass * n_q; ++r) qp[r] = c.qf + qrows[i + r] * hd_pad;
      float* y = s + i * s_stride;
      c.fscore(kbase, static_cast<int64_t>(c.kv.k_stride), 1, 0, act, n_act, i == 0 ? n_pf : 0, hd,
               qp, n_q, n_pass, &y, s_stride);
      i += n_pass * n_q;
    }
  } else {
    for (int64_t k = 0; k < n_act; ++k) {
      c.kc.fu(c.kv.k_type, kbase + act[k] * c.kv.k_stride, hd, hd_pad, ks.kf + k * hd_pad);
    }
    FloatTileArgs ta;
    ta.n_pad = hd_pad;
    ta.y_stride = s_stride;
    for (int64_t k = 0; k < n_act; k += kTileRows) {
      ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, n_act - k));
      for (int j = 0; j < kTileRows; ++j)
        ta.w[j] = ks.kf + std::min<int64_t>(k + j, n_act - 1) * hd_pad;
      for (int64_t i = 0; i < n_rows; i += kTileCols) {
        ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, n_rows - i));
        for (int j = 0; j < kTileCols; ++j) {
          ta.x[j] = c.qf + qrows[std::min<int64_t>(i + j, n_rows - 1)] * hd_pad;
        }
        ta.y = s + i * s_stride + k;
        FloatTile(ta);
      }
    }
  }
  ScaleMaskTile(c, qrows, n_rows, act, n_act, s, s_stride);
}

/// Row maximum of s[0, n) (n a multiple of the vector length; -inf when every entry is).
HWY_INLINE float RowMax(const float* s, int64_t n) {
  const hn::ScalableTag<float> df;
  auto vmax = hn::Set(df, -INFINITY);
  for (int64_t k = 0; k < n; k += static_cast<int64_t>(hn::Lanes(df))) {
    vmax = hn::Max(vmax, hn::LoadU(df, s + k));
  }
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
}

/// p[k] = exp(s[k] - m) for k < n (n a multiple of the vector length); exp(-inf) = 0.
HWY_INLINE void ExpShifted(const float* s, float m, int64_t n, float* p) {
  const hn::ScalableTag<float> df;
  const auto vm = hn::Set(df, m);
  for (int64_t k = 0; k < n; k += static_cast<int64_t>(hn::Lanes(df))) {
    hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, s + k), vm)), df, p + k);
  }
}

/// The canonical accumulation: for k < n in order, l += p[k] (when l is not null) and
/// acc[d] = fma(p[k], v_k[d], acc[d]) for d < width (a multiple of the vector length), with
/// v_k = v + k * v_stride. One sequential chain per output element.
HWY_INLINE void AccumulateV(const float* p, int64_t n, const float* v, int64_t v_stride,
                            int64_t width, float* acc, float* l) {
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  if (l != nullptr) {
    float sum = *l;
    for (int64_t k = 0; k < n; ++k) sum += p[k];
    *l = sum;
  }
  int64_t d = 0;
  for (; d + 4 * nf <= width; d += 4 * nf) {
    auto a0 = hn::Load(df, acc + d), a1 = hn::Load(df, acc + d + nf);
    auto a2 = hn::Load(df, acc + d + 2 * nf), a3 = hn::Load(df, acc + d + 3 * nf);
    for (int64_t k = 0; k < n; ++k) {
      const auto pk = hn::Set(df, p[k]);
      const float* vk = v + k * v_stride + d;
      a0 = hn::MulAdd(pk, hn::Load(df, vk), a0);
      a1 = hn::MulAdd(pk, hn::Load(df, vk + nf), a1);
      a2 = hn::MulAdd(pk, hn::Load(df, vk + 2 * nf), a2);
      a3 = hn::MulAdd(pk, hn::Load(df, vk + 3 * nf), a3);
    }
    hn::Store(a0, df, acc + d);
    hn::Store(a1, df, acc + d + nf);
    hn::Store(a2, df, acc + d + 2 * nf);
    hn::Store(a3, df, acc + d + 3 * nf);
  }
  for (; d < width; d += nf) {
    auto a0 = hn::Load(df, acc + d);
    for (int64_t k = 0; k < n; ++k) {
      a0 = hn::MulAdd(hn::Set(df, p[k]), hn::Load(df, v + k * v_stride + d), a0);
    }
    hn::Store(a0, df, acc + d);
  }
}

/// V scratch of one task: a tile of dequantized rows and the unpack temporaries.
struct VScratch {
  float* vbuf = nullptr;  // kCellTile x v_stride
  int64_t v_stride = 0;
  uint8_t* tmp8 = nullptr;
  float* tmpf = nullptr;
};

/// For rows i < n_rows: acc_i[0, width) += sum over k < n (in order) of p_i[k] * V[cells[k]][d0 +
/// .], one fma chain per element, and l_i += p_i[k] when l is given; p_i = p + i * p_stride,
/// acc_i = acc + i * acc_stride, l_i = l[i]. The V rows' head g segment starts at vhead +
/// cell * v_stride. Direct kernels read F32 / F16 / BF16 / Q8_0 rows in place; other types are
/// dequantized into the scratch first; the arithmetic per element is the same.
inline void AccumulateTile(const Call& c, const uint8_t* vhead, const int32_t* cells, int64_t n,
                           int64_t n_after, int64_t d0, int64_t width, const float* p,
                           int64_t p_stride, int64_t n_rows, float* acc, int64_t acc_stride,
                           float* l, const VScratch& vs) {
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  if (c.vacc != nullptr) {
    // The tile's rows, then up to kCellTile rows of the next tile. Every call over this tile
    // fetches its slice of the next tile's bytes of [d0, d0 + width) while it reads this one, so
    // that those rows arrive while this tile is summed (the later passes over a tile find its
    // rows in the cache and would leave the memory idle).
    const uint8_t* rows[2 * kCellTile];
    const int64_t n_next = std::min(n_after, kCellTile);
    for (int64_t k = 0; k < n + n_next; ++k) rows[k] = vhead + cells[k] * c.kv.v_stride;
    const GgmlType vt = c.kv.v_type;
    const int64_t pf0 = vt == GgmlType::Q8_0 ? d0 / 32 * 34 : vt == GgmlType::F32 ? d0 * 4 : d0 * 2;
    const int64_t pf1 = vt == GgmlType::Q8_0  ? ((d0 + width - 1) / 32 + 1) * 34
                        : vt == GgmlType::F32 ? (d0 + width) * 4
                                              : (d0 + width) * 2;
    const int64_t per_pass = RowsPerPass(n_rows);
    const int64_t n_calls = ceil_div(n_rows, per_pass) * ceil_div(width, kVVecs * nf);
    // Call `call` fetches next-tile rows [call * per_call, (call + 1) * per_call), one every
    // pf_every rows it reads.
    const int64_t per_call = ceil_div(n_next, n_calls);
    const int64_t pf_every = std::max<int64_t>(1, n / std::max<int64_t>(1, per_call));
    int64_t call = 0;
    for (int64_t i = 0; i < n_rows; i += per_pass) {
      const int n_q = static_cast<int>(std::min<int64_t>(per_pass, n_rows - i));
      const float* pp[kDirectRows];
      float* ap[kDirectRows];
      for (int64_t d = 0; d < width; d += kVVecs * nf, ++call) {
        const int n_vec = static_cast<int>(std::min<int64_t>(kVVecs, (width - d) / nf));
        for (int r = 0; r < n_q; ++r) {
          pp[r] = p + (i + r) * p_stride;
          ap[r] = acc + (i + r) * acc_stride + d;
        }
        const int64_t j0 = std::min(n_next, call * per_call);
        const int64_t j1 = std::min(n_next, j0 + per_call);
        c.vacc(n_q, n_vec, rows, n, d0 + d, pp, ap, d == 0 && l != nullptr ? l + i : nullptr,
               rows + n + j0, j1 - j0, pf_every, pf0, pf1);
      }
    }
    return;
  }
  const size_t seg_offset = row_size(c.kv.v_type, d0);
  for (int64_t k = 0; k < n; ++k) {
    DequantSegment(c.vc, vhead + cells[k] * c.kv.v_stride + seg_offset, width, vs.v_stride,
                   vs.vbuf + k * vs.v_stride, vs.tmp8, vs.tmpf);
  }
  for (int64_t i = 0; i < n_rows; ++i) {
    AccumulateV(p + i * p_stride, n, vs.vbuf, vs.v_stride, round_up(width, nf),
                acc + i * acc_stride, l != nullptr ? l + i : nullptr);
  }
}
}  // namespace attn_detail

void Attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, ThreadPool* pool) {
  using namespace attn_detail;  // NOLINT(build/namespaces)
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  Call c;
  c.p = p;
  c.kv = kv;
  c.mask = mask;
  c.mask_stride = mask_stride;
  c.hd = p.head_dim;
  c.hd_pad = round_up(c.hd, kPadElems);
  c.gqa = p.n_head / p.n_head_kv;
  c.kc = MakeCodec(kv.k_type, /*allow_int=*/true);
  c.vc = MakeCodec(kv.v_type, /*allow_int=*/false);
  const int64_t hd = c.hd, hd_pad = c.hd_pad, gqa = c.gqa;
  const int64_t n_rows_all = p.n_tokens * p.n_head;
  if (!c.kc.use_int && hd % nf == 0) c.fscore = GetFloatScores(kv.k_type);
  if (hd % nf == 0) c.vacc = GetVAcc(kv.v_type);

  // Work split: tasks = K/V heads x token chunks. When there are few of them (decoding), the
  // call runs in two phases instead: scores over ranges of cells, then the softmax and V
  // accumulation over ranges of output dimensions. Either way every output element is computed
  // by the same sequence of operations (the header comment), so the split changes nothing.
  const int64_t tokens_per_task = std::max<int64_t>(1, kRowsPerTask / gqa);
  const int64_t n_chunks = ceil_div(p.n_tokens, tokens_per_task);
  const int64_t base_tasks = p.n_head_kv * n_chunks;

  // ---- per call: the visiting order, Q in the form the score tiles read ----
  [[maybe_unused]] int group = 0;
#if MNEMO_INT_DOT
  if (c.kc.use_int) {
    group = c.kc.ik.format.group;
    c.n_off = OffsetLen(hd_pad, group);
  }
#endif
  const int64_t n_list = kv.order != nullptr ? kv.n_order : kv.n_kv;
  const int64_t call_bytes =
      n_list * 4 + n_rows_all * (hd_pad * 4 + hd_pad + hd_pad + c.n_off * 4) + 8 * 64;
  Carver call(static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(static_cast<size_t>(call_bytes))));
  if (kv.order != nullptr) {
    c.cells = kv.order;
  } else {
    int32_t* ident = call.take<int32_t>(n_list);
    for (int64_t j = 0; j < n_list; ++j) ident[j] = static_cast<int32_t>(j);
    c.cells = ident;
  }
  c.n_cells = n_list;
#if MNEMO_INT_DOT
  if (c.kc.use_int) {
    c.qr.q = call.take<int8_t>(n_rows_all * hd_pad);
    c.qr.dx = call.take<float>(n_rows_all * hd_pad / 4);
    c.qr.sx = call.take<float>(std::max<int64_t>(1, n_rows_all * c.n_off));
    c.qr.n_pad = hd_pad;
    c.qr.n_off = c.n_off;
    c.qr.group = group;
    QuantizeRows(q, hd, n_rows_all, hd, c.qr);
  }
#endif
  if (!c.kc.use_int) {
    float* qf = call.take<float>(n_rows_all * hd_pad);
    for (int64_t r = 0; r < n_rows_all; ++r) {
      std::memcpy(qf + r * hd_pad, q + r * hd, hd * sizeof(float));
      std::memset(qf + r * hd_pad + hd, 0, (hd_pad - hd) * sizeof(float));
    }
    c.qf = qf;
  }

  // The cells some token of the call may see, in visiting order.
  // Every cell is written at the list's end, and kept by advancing the count (no push_back).
  std::vector<int32_t>& act_all = ActScratch();
  act_all.resize(static_cast<size_t>(n_list));
  int64_t n_act_all = 0;
  for (int64_t j = 0; j < n_list; ++j) {
    act_all[n_act_all] = c.cells[j];
    n_act_all += VisibleToAny(c, 0, p.n_tokens, c.cells[j]) ? 1 : 0;
  }
  act_all.resize(static_cast<size_t>(n_act_all));
  if (n_act_all == 0) {
    std::fill(out, out + n_rows_all * hd, 0.0f);
    return;
  }

  if (base_tasks < kSplitBelowTasks && n_act_all >= 2 * kMinCellsPerSplit) {
    // ---- decoding: phase 1, scores [n_rows_all x s_stride] over ranges of cells ----
    // Score rows in task order: token t, head h at row (g * n_tokens + t) * gqa + h % gqa
    // (g = h / gqa), so that the rows of one (K/V head, token chunk) task are consecutive.
    const int64_t s_stride = round_up(n_act_all, nf);
    std::vector<float>& scores = ScoreScratch();
    scores.resize(static_cast<size_t>(n_rows_all * s_stride));
    const int64_t n_split = std::clamp<int64_t>(
        n_act_all / kMinCellsPerSplit, 1,
        std::min<int64_t>(kMaxSplits, kSplitsPerThread * internal::n_threads_of(pool)));
    const int64_t cells_per_split = round_up(ceil_div(n_act_all, n_split), kCellTile);
    const int64_t n_ranges = ceil_div(n_act_all, cells_per_split);
    // A task scores a range of cells for every K/V head, head by head per tile of cells: it
    // reads whole K rows, in memory order.
    internal::parallel_for(pool, n_chunks * n_ranges, [&](int64_t task, int) {
      const int64_t range = task % n_ranges;
      const int64_t t0 = (task / n_ranges) * tokens_per_task;
      const int64_t t1 = std::min(p.n_tokens, t0 + tokens_per_task);
      const int64_t n_rows = (t1 - t0) * gqa;
      Carver ts(static_cast<uint8_t*>(
          internal::thread_scratch(internal::kSlotTask)
              .get(static_cast<size_t>(KScratchBytes(c) + 8 * n_rows +
                                       8 * p.n_head_kv * (n_rows + 1) + 4 * 64))));
      const KScratch ks = TakeKScratch(c, ts);
      int64_t* qrows = ts.take<int64_t>(n_rows);
      // The direct kernel's query rows, pass by pass: the pass of rows [i, i + n_q) reads
      // qp[i * n_head_kv + g * n_q + r] for K/V head g, row i + r.
      const int64_t per_pass = RowsPerPass(n_rows, kScoreRowsMax);
      const float** qp = ts.take<const float*>(p.n_head_kv * n_rows);
      float** yp = ts.take<float*>(p.n_head_kv);
      for (int64_t i = 0; c.fscore != nullptr && i < n_rows; i += per_pass) {
        const int64_t n_q = std::min<int64_t>(per_pass, n_rows - i);
        for (int64_t g = 0; g < p.n_head_kv; ++g) {
          for (int64_t r = 0; r < n_q; ++r) {
            const int64_t ir = i + r;
            qp[i * p.n_head_kv + g * n_q + r] =
                c.qf + ((t0 + ir / gqa) * p.n_head + g * gqa + ir % gqa) * hd_pad;
          }
        }
      }
      const int64_t c0 = range * cells_per_split;
      const int64_t c1 = std::min(n_act_all, c0 + cells_per_split);
      for (int64_t k0 = c0; k0 < c1; k0 += kCellTile) {
        const int64_t n_tile = std::min(kCellTile, c1 - k0);
        if (c.fscore != nullptr) {
          // Every K/V head's dot products at once, group of cells by group: whole K rows, in
          // memory order (head by head, each pass would read a strided part of every row).
          // The passes of whole rows go group by group too; a shorter last pass goes over the
          // tile again and finds its rows in the cache.
          const int64_t head_bytes = static_cast<int64_t>(row_size(kv.k_type, hd));
          for (int64_t i = 0; i < n_rows;) {
            const int n_q = static_cast<int>(std::min<int64_t>(per_pass, n_rows - i));
            const int n_pass = i == 0 ? static_cast<int>(n_rows / per_pass) : 1;
            for (int64_t g = 0; g < p.n_head_kv; ++g) {
              yp[g] = scores.data() + ((g * p.n_tokens + t0) * gqa + i) * s_stride + k0;
            }
            c.fscore(static_cast<const uint8_t*>(kv.k), static_cast<int64_t>(kv.k_stride),
                     p.n_head_kv, head_bytes, act_all.data() + k0, n_tile, i == 0 ? c1 - k0 : 0, hd,
                     qp + i * p.n_head_kv, n_q, n_pass, yp, s_stride);
            i += n_pass * n_q;
          }
        }
        for (int64_t g = 0; g < p.n_head_kv; ++g) {
          for (int64_t i = 0; i < n_rows; ++i) {
            qrows[i] = (t0 + i / gqa) * p.n_head + g * gqa + i % gqa;
          }
          float* s0 = scores.data() + (g * p.n_tokens + t0) * gqa * s_stride;
          if (c.fscore != nullptr) {
            ScaleMaskTile(c, qrows, n_rows, act_all.data() + k0, n_tile, s0 + k0, s_stride);
          } else {
            ScoreTile(c, g, qrows, n_rows, act_all.data() + k0, n_tile, c1 - k0, ks, s0 + k0,
                      s_stride);
          }
          if (k0 + kCellTile >= c1 && c1 == n_act_all) {
            for (int64_t i = 0; i < n_rows; ++i) {
              std::fill(s0 + i * s_stride + n_act_all, s0 + (i + 1) * s_stride, -INFINITY);
            }
          }
        }
      }
    });
    // ---- phase 2: per row, the weights exp(s - max) in place ----
    const auto weights = [&](int64_t r) {
      float* si = scores.data() + r * s_stride;
      const float m = RowMax(si, s_stride);
      if (m == -INFINITY) {
        std::fill(si, si + s_stride, 0.0f);
      } else {
        ExpShifted(si, m, s_stride, si);
      }
    };
    // ---- phase 3: V over ranges of output dimensions: as few as give every thread a task,
    // so that a task reads whole head rows of V. Each task also sums its rows' weights l (the
    // same sequential chain in visiting order, inside the V loop where it costs nothing) ----
    int64_t n_dblocks = 1;
    while (base_tasks * n_dblocks < internal::n_threads_of(pool) &&
           (hd / (2 * n_dblocks)) % 32 == 0) {
      n_dblocks *= 2;
    }
    // With whole head rows (one task per row), each V task computes its own rows' weights
    // first, fetching its first V tile meanwhile: no call-wide step between scores and V, and
    // the memory is busy during the exponentials. Split rows share their weights: a phase.
    const bool weights_in_v = n_dblocks == 1;
    if (!weights_in_v) {
      internal::parallel_for(pool, n_rows_all, [&](int64_t r, int) { weights(r); });
    }
    const int64_t width = hd / n_dblocks;
    const int64_t v_stride = round_up(width, kPadElems);
    internal::parallel_for(pool, base_tasks * n_dblocks, [&](int64_t task, int) {
      const int64_t g = task % p.n_head_kv;
      const int64_t rest = task / p.n_head_kv;
      const int64_t db = rest % n_dblocks;
      const int64_t t0 = (rest / n_dblocks) * tokens_per_task;
      const int64_t t1 = std::min(p.n_tokens, t0 + tokens_per_task);
      const int64_t n_rows = (t1 - t0) * gqa;
      const int64_t task_bytes =
          4 * (n_rows * v_stride + kCellTile * v_stride + 3 * v_stride + n_rows) + 5 * 64;
      Carver ts(static_cast<uint8_t*>(
          internal::thread_scratch(internal::kSlotTask).get(static_cast<size_t>(task_bytes))));
      float* acc = ts.take<float>(n_rows * v_stride);
      float* l = ts.take<float>(n_rows);
      std::fill(l, l + n_rows, 0.0f);
      VScratch vs;
      vs.vbuf = ts.take<float>(kCellTile * v_stride);
      vs.v_stride = v_stride;
      vs.tmp8 = ts.take<uint8_t>(v_stride);
      vs.tmpf = ts.take<float>(2 * v_stride);
      const int64_t srow0 = (g * p.n_tokens + t0) * gqa;
      const float* p0 = scores.data() + srow0 * s_stride;
      std::fill(acc, acc + n_rows * v_stride, 0.0f);
      const uint8_t* vhead = VHead(kv, g, hd);
      if (weights_in_v) {
        // Row i's weights, with 1 / n_rows of the first tile's rows fetched before each row.
        const int64_t n_first = std::min(kCellTile, n_act_all);
        const size_t seg = row_size(kv.v_type, hd);
        for (int64_t i = 0; i < n_rows; ++i) {
          for (int64_t k = i * n_first / n_rows; k < (i + 1) * n_first / n_rows; ++k) {
            const char* row = reinterpret_cast<const char*>(vhead + act_all[k] * kv.v_stride);
            for (size_t b = 0; b < seg; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
            _mm_prefetch(row + seg - 1, _MM_HINT_T1);
          }
          weights(srow0 + i);
        }
      }
      for (int64_t k0 = 0; k0 < n_act_all; k0 += kCellTile) {
        const int64_t n = std::min(kCellTile, n_act_all - k0);
        AccumulateTile(c, vhead, act_all.data() + k0, n, n_act_all - k0 - n, db * width, width,
                       p0 + k0, s_stride, n_rows, acc, v_stride, l, vs);
      }
      for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t qrow = (t0 + i / gqa) * p.n_head + g * gqa + i % gqa;
        float* o = out + qrow * hd + db * width;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int64_t d = 0; d < width; ++d) o[d] = acc[i * v_stride + d] * inv;
      }
    });
    return;
  }

  // ---- tasks = K/V heads x token chunks, each whole ----
  internal::parallel_for(pool, base_tasks, [&](int64_t task, int) {
    const int64_t g = task % p.n_head_kv;
    const int64_t t0 = (task / p.n_head_kv) * tokens_per_task;
    const int64_t t1 = std::min(p.n_tokens, t0 + tokens_per_task);
    const int64_t n_rows = (t1 - t0) * gqa;  // row i: token t0 + i / gqa, head g * gqa + i % gqa
    // The cells some token of the task may see, in visiting order (a subsequence of the call's:
    // the cells left out have weight 0 for every row of the task, adding nothing).
    std::vector<int32_t>& act = TaskActScratch();
    act.clear();
    for (int64_t j = 0; j < n_act_all; ++j) {
      if (VisibleToAny(c, t0, t1, act_all[j])) act.push_back(act_all[j]);
    }
    const int64_t n_act = static_cast<int64_t>(act.size());
    const int64_t s_stride = round_up(std::max<int64_t>(1, n_act), nf);
    const int64_t task_bytes =
        KScratchBytes(c) +
        4 * (n_rows * (hd_pad + 2 + s_stride) + kCellTile * hd_pad + 3 * hd_pad) + 8 * n_rows +
        10 * 64;
    Carver ts(static_cast<uint8_t*>(
        internal::thread_scratch(internal::kSlotTask).get(static_cast<size_t>(task_bytes))));
    const KScratch ks = TakeKScratch(c, ts);
    float* acc = ts.take<float>(n_rows * hd_pad);
    float* l = ts.take<float>(n_rows);
    float* m = ts.take<float>(n_rows);
    float* s = ts.take<float>(n_rows * s_stride);
    VScratch vs;
    vs.vbuf = ts.take<float>(kCellTile * hd_pad);
    vs.v_stride = hd_pad;
    vs.tmp8 = ts.take<uint8_t>(hd_pad);
    vs.tmpf = ts.take<float>(2 * hd_pad);
    int64_t* qrows = ts.take<int64_t>(n_rows);
    for (int64_t i = 0; i < n_rows; ++i) qrows[i] = (t0 + i / gqa) * p.n_head + g * gqa + i % gqa;

    // 1. Scores of every row over every cell of the task.
    for (int64_t k0 = 0; k0 < n_act; k0 += kCellTile) {
      ScoreTile(c, g, qrows, n_rows, act.data() + k0, std::min(kCellTile, n_act - k0), n_act - k0,
                ks, s + k0, s_stride);
    }
    // 2. Row maxima (exact, order-free) and weights exp(s - max).
    for (int64_t i = 0; i < n_rows; ++i) {
      float* si = s + i * s_stride;
      for (int64_t k = n_act; k < s_stride; ++k) si[k] = -INFINITY;
      m[i] = RowMax(si, s_stride);
      if (m[i] != -INFINITY) {
        ExpShifted(si, m[i], s_stride, si);
      } else {
        std::fill(si, si + s_stride, 0.0f);
      }
      l[i] = 0.0f;
    }
    std::fill(acc, acc + n_rows * hd_pad, 0.0f);
    // 3. acc_i = sum_k p_ik v_k and l_i = sum_k p_ik, in visiting order.
    const uint8_t* vhead = VHead(kv, g, hd);
    for (int64_t k0 = 0; k0 < n_act; k0 += kCellTile) {
      const int64_t n = std::min(kCellTile, n_act - k0);
      AccumulateTile(c, vhead, act.data() + k0, n, n_act - k0 - n, 0, hd, s + k0, s_stride, n_rows,
                     acc, hd_pad, l, vs);
    }
    for (int64_t i = 0; i < n_rows; ++i) {
      float* o = out + qrows[i] * hd;
      const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[i * hd_pad + d] * inv;
    }
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_ATTENTION_INL_H_
