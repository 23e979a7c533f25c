// Per-target attention over KV-cache rows: an online-softmax loop over tiles of cells
// (FlashAttention-style), K and V read in their cache type. Included (through
// foreach_target.h) only by attention.cc; toggle guard below.
//
// One task = one K/V head g, a chunk of query tokens, and a range of cells. Its query rows are
// every (token, head) of the chunk whose head uses g (grouped-query attention), so each K / V
// row is unpacked once and used by all of them. Per tile of kCellTile cells:
//   1. the cells that some row of the task can see (mask != -inf) are listed; the rest are
//      skipped without touching K or V;
//   2. K rows of those cells -> the dot-friendly form (integer unpack for quantized K, with Q
//      quantized once per call; float for F32 / F16 / BF16), scores by the matmul
//      micro-kernels;
//   3. scale, soft-cap, mask, then the online-softmax update of each row's running max m, sum
//      l and accumulator (rescaled by exp(m_old - m_new) when the max grows);
//   4. V rows dequantized to float, one at a time per cell, and accumulated with the weights.
// When there are too few (head, token-chunk) tasks for the threads (decoding), the cells are
// split into ranges too; each range leaves (m, l, acc) and a merge pass combines them.
// Decoding on AVX-512 (at most 4 query rows per K/V head, head_dim % 64 == 0) replaces steps 2
// and 4 with fused kernels (namespace fast_attn below): K blocks go through the matmul decoders
// straight into registers, and each V row is widened once per 64 dimensions into accumulators
// that stay in registers; nothing passes through scratch.

#if defined(MNEMO_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_ATTENTION_INL_H_
#undef MNEMO_KERNELS_ATTENTION_INL_H_
#else
#define MNEMO_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/decode512-inl.h"
#include "kernels/internal.h"
#include "kernels/matmul-inl.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "mnemo/kernels.h"

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

#if MNEMO_HAVE_FAST512
// ---- AVX-512 fast path for few query rows (decoding) -----------------------------------------
// Scores: K rows go through the fused decoders of decode512-inl.h (quantized K) or are widened
// on the fly (F16 / BF16 / F32 K), 4 cells x up to 4 query rows per register tile, no scratch.
// V: each V row is widened once per 64 dimensions and multiply-added into the query rows'
// accumulators, which stay in registers across the tile's cells.

namespace fast_attn {

/// Scores of n_cells (<= 4) cells for n_q (<= 4) query rows: y[r * y_stride + j].
using ScoreFn = void (*)(const uint8_t* const* cells, int n_cells, int64_t hd,
                         const int8_t* const* q8, const float* const* dx, const float* const* aux,
                         const float* const* qf, int n_q, float* y, int64_t y_stride);

template <class Dec>
void DecoderScores(const uint8_t* const* cells, int n_cells, int64_t hd, const int8_t* const* q8,
                   const float* const* dx, const float* const* aux, const float* const*, int n_q,
                   float* y, int64_t y_stride) {
  switch (n_q) {
    case 1:
      return fast512::GemvTile<Dec, 4, 1>(cells, n_cells, hd, q8, dx, aux, y, y_stride);
    case 2:
      return fast512::GemvTile<Dec, 4, 2>(cells, n_cells, hd, q8, dx, aux, y, y_stride);
    case 3:
      return fast512::GemvTile<Dec, 4, 3>(cells, n_cells, hd, q8, dx, aux, y, y_stride);
    default:
      return fast512::GemvTile<Dec, 4, 4>(cells, n_cells, hd, q8, dx, aux, y, y_stride);
  }
}

/// 16 elements of a float-type row widened to f32.
template <GgmlType kType>
HWY_INLINE hn::Vec<DF32> Widen16(const uint8_t* row, int64_t i) {
  const DF32 df;
  if constexpr (kType == GgmlType::F32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == GgmlType::F16) {
    const hn::Rebind<hwy::float16_t, DF32> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    const hn::Rebind<hwy::bfloat16_t, DF32> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  }
}

template <GgmlType kType, int kQ>
HWY_NOINLINE void FloatScoresT(const uint8_t* const* cells, int n_cells, int64_t hd,
                               const float* const* qf, float* y, int64_t y_stride) {
  // The loops over r and j are unrolled (pragmas) so that acc and k live in registers; GCC
  // otherwise keeps these arrays on the stack.
  const DF32 df;
  hn::Vec<DF32> acc[kQ][4];
#pragma GCC unroll 4
  for (int r = 0; r < kQ; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = hn::Zero(df);
  }
  for (int64_t i = 0; i < hd; i += 16) {
    hn::Vec<DF32> k[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) k[j] = Widen16<kType>(cells[j], i);
#pragma GCC unroll 4
    for (int r = 0; r < kQ; ++r) {
      const auto qv = hn::Load(df, qf[r] + i);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r][j] = hn::MulAdd(k[j], qv, acc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kQ; ++r) {
    if (n_cells == 4) {
      Reduce4(df, acc[r][0], acc[r][1], acc[r][2], acc[r][3], y + r * y_stride);
    } else {
      for (int j = 0; j < n_cells; ++j) y[r * y_stride + j] = ReduceSum(df, acc[r][j]);
    }
  }
}

template <GgmlType kType>
void FloatScores(const uint8_t* const* cells, int n_cells, int64_t hd, const int8_t* const*,
                 const float* const*, const float* const*, const float* const* qf, int n_q,
                 float* y, int64_t y_stride) {
  switch (n_q) {
    case 1:
      return FloatScoresT<kType, 1>(cells, n_cells, hd, qf, y, y_stride);
    case 2:
      return FloatScoresT<kType, 2>(cells, n_cells, hd, qf, y, y_stride);
    case 3:
      return FloatScoresT<kType, 3>(cells, n_cells, hd, qf, y, y_stride);
    default:
      return FloatScoresT<kType, 4>(cells, n_cells, hd, qf, y, y_stride);
  }
}

/// acc[r][0, hd) += sum_k p[r * p_stride + k] * v_k for the n_cells V rows, r < n_q.
using VAccFn = void (*)(const uint8_t* const* cells, int64_t n_cells, int64_t hd, const float* p,
                        int64_t p_stride, int n_q, float* const* acc);

template <GgmlType kType, int kQ>
HWY_NOINLINE void VAccT(const uint8_t* const* cells, int64_t n_cells, int64_t hd, const float* p,
                        int64_t p_stride, float* const* acc) {
  const DF32 df;
  for (int64_t d0 = 0; d0 < hd; d0 += 64) {  // 64 dimensions = 4 vectors per row in registers
    hn::Vec<DF32> a[kQ][4];  // unrolled loops (pragmas): a and v stay in registers
#pragma GCC unroll 4
    for (int r = 0; r < kQ; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[r][j] = hn::Load(df, acc[r] + d0 + 16 * j);
    }
    for (int64_t k = 0; k < n_cells; ++k) {
      const uint8_t* row = cells[k];
      if constexpr (kType == GgmlType::Q8_0) {
        // Two blocks of 32: the block scale is folded into each row's weight.
        const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + d0 / 32;
        const hn::Rebind<int8_t, DF32> d8;
        const hn::Rebind<int32_t, DF32> di;
        hn::Vec<DF32> v[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          v[j] = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, b[j / 2].qs + 16 * (j % 2))));
        }
        const float s0 = F16ToF32(b[0].d), s1 = F16ToF32(b[1].d);
#pragma GCC unroll 4
        for (int r = 0; r < kQ; ++r) {
          const float pk = p[r * p_stride + k];
          const auto w0 = hn::Set(df, pk * s0), w1 = hn::Set(df, pk * s1);
          a[r][0] = hn::MulAdd(w0, v[0], a[r][0]);
          a[r][1] = hn::MulAdd(w0, v[1], a[r][1]);
          a[r][2] = hn::MulAdd(w1, v[2], a[r][2]);
          a[r][3] = hn::MulAdd(w1, v[3], a[r][3]);
        }
      } else {
        hn::Vec<DF32> v[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) v[j] = Widen16<kType>(row, d0 + 16 * j);
#pragma GCC unroll 4
        for (int r = 0; r < kQ; ++r) {
          const auto w = hn::Set(df, p[r * p_stride + k]);
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) a[r][j] = hn::MulAdd(w, v[j], a[r][j]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kQ; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) hn::Store(a[r][j], df, acc[r] + d0 + 16 * j);
    }
  }
}

template <GgmlType kType>
void VAcc(const uint8_t* const* cells, int64_t n_cells, int64_t hd, const float* p,
          int64_t p_stride, int n_q, float* const* acc) {
  switch (n_q) {
    case 1:
      return VAccT<kType, 1>(cells, n_cells, hd, p, p_stride, acc);
    case 2:
      return VAccT<kType, 2>(cells, n_cells, hd, p, p_stride, acc);
    case 3:
      return VAccT<kType, 3>(cells, n_cells, hd, p, p_stride, acc);
    default:
      return VAccT<kType, 4>(cells, n_cells, hd, p, p_stride, acc);
  }
}

/// The fast path of a K/V type pair; null members where a stage has none.
struct Plan {
  ScoreFn score = nullptr;
  bool quantize_q = false;  // score reads Q quantized (QuantizeRowsAux with aux_mode)
  int aux_mode = 0;
  VAccFn vacc = nullptr;
};

template <class Dec>
constexpr int AuxMode() {
  return Dec::kOffset == fast512::Offset::kInt     ? Dec::kIntOffset
         : Dec::kOffset == fast512::Offset::kFloat ? -1
                                                   : 0;
}

inline Plan MakePlan(GgmlType k_type, GgmlType v_type, int64_t hd) {
  Plan pl;
  if (hd % 64 != 0) return pl;
  switch (k_type) {
    case GgmlType::Q8_0:
      pl = {&DecoderScores<fast512::DecQ8_0>, true, AuxMode<fast512::DecQ8_0>()};
      break;
    case GgmlType::Q4_0:
      pl = {&DecoderScores<fast512::DecQ4_0>, true, AuxMode<fast512::DecQ4_0>()};
      break;
    case GgmlType::Q4_1:
      pl = {&DecoderScores<fast512::DecQ4_1>, true, AuxMode<fast512::DecQ4_1>()};
      break;
    case GgmlType::Q5_0:
      pl = {&DecoderScores<fast512::DecQ5_0>, true, AuxMode<fast512::DecQ5_0>()};
      break;
    case GgmlType::Q5_1:
      pl = {&DecoderScores<fast512::DecQ5_1>, true, AuxMode<fast512::DecQ5_1>()};
      break;
    case GgmlType::IQ4_NL:
      pl = {&DecoderScores<fast512::DecIQ4_NL>, true, AuxMode<fast512::DecIQ4_NL>()};
      break;
    case GgmlType::F16:
      pl.score = &FloatScores<GgmlType::F16>;
      break;
    case GgmlType::BF16:
      pl.score = &FloatScores<GgmlType::BF16>;
      break;
    case GgmlType::F32:
      pl.score = &FloatScores<GgmlType::F32>;
      break;
    default:
      break;
  }
  switch (v_type) {
    case GgmlType::Q8_0:
      pl.vacc = &VAcc<GgmlType::Q8_0>;
      break;
    case GgmlType::F16:
      pl.vacc = &VAcc<GgmlType::F16>;
      break;
    case GgmlType::BF16:
      pl.vacc = &VAcc<GgmlType::BF16>;
      break;
    case GgmlType::F32:
      pl.vacc = &VAcc<GgmlType::F32>;
      break;
    default:
      break;
  }
  return pl;
}

}  // namespace fast_attn
#endif  // MNEMO_HAVE_FAST512

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

void Attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, ThreadPool* pool) {
  using namespace attn_detail;  // NOLINT(build/namespaces)
  const int64_t hd = p.head_dim;
  const int64_t hd_pad = round_up(hd, kPadElems);
  const int64_t gqa = p.n_head / p.n_head_kv;
  const int64_t n_rows_all = p.n_tokens * p.n_head;
  const hn::ScalableTag<float> df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));

  const RowCodec kc = MakeCodec(kv.k_type, /*allow_int=*/true);
  const RowCodec vc = MakeCodec(kv.v_type, /*allow_int=*/false);

  // Decoding (few query rows per K/V head) on AVX-512 takes the fused fast path.
#if MNEMO_HAVE_FAST512
  const fast_attn::Plan fp = fast_attn::MakePlan(kv.k_type, kv.v_type, hd);
  const bool fast = fp.score != nullptr && gqa <= 4 && p.n_tokens * gqa <= 4;
#else
  const bool fast = false;
#endif

  // ---- plan: tasks = K/V heads x token chunks x cell ranges ----
  const int64_t tokens_per_task =
      fast ? std::max<int64_t>(1, 4 / gqa) : std::max<int64_t>(1, kRowsPerTask / gqa);
  const int64_t n_token_chunks = ceil_div(p.n_tokens, tokens_per_task);
  const int64_t base_tasks = p.n_head_kv * n_token_chunks;
  // The split depends on the shapes only, never on the thread count, so results are the same
  // bits for any number of threads.
  int64_t n_split = 1;
  if (base_tasks < kSplitBelowTasks) {
    n_split = std::clamp<int64_t>(kv.n_kv / kMinCellsPerSplit, 1, kMaxSplits);
  }
  const int64_t cells_per_split = round_up(ceil_div(kv.n_kv, n_split), kCellTile);
  n_split = std::max<int64_t>(1, ceil_div(kv.n_kv, cells_per_split));

  // ---- per call: Q in the form the score kernel reads; partial results when split ----
  [[maybe_unused]] int group = 0;
  int64_t n_off = 0;
#if MNEMO_INT_DOT
  if (kc.use_int) {
    group = kc.ik.format.group;
    n_off = OffsetLen(hd_pad, group);
  }
#endif
  const int64_t part_stride = hd_pad + 2;  // acc[hd_pad], m, l
  const int64_t call_bytes =
      n_rows_all * (hd_pad * 4 + hd_pad + hd_pad + n_off * 4 + 2 * hd_pad + hd_pad) +
      (n_split > 1 ? n_split * n_rows_all * part_stride * 4 : 0) + 8 * 64;
  Carver call(static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(static_cast<size_t>(call_bytes))));
  float* qf = nullptr;
  int8_t* fq8 = nullptr;  // fast path: Q quantized for the decoders, with lane sums
  [[maybe_unused]] float* fdx = nullptr;
  [[maybe_unused]] float* faux = nullptr;
#if MNEMO_HAVE_FAST512
  if (fast && fp.quantize_q) {
    fq8 = call.take<int8_t>(n_rows_all * hd_pad);
    fdx = call.take<float>(n_rows_all * hd_pad / 4);
    faux = call.take<float>(n_rows_all * hd_pad / 4);
    QuantizeRowsAux(q, hd, n_rows_all, hd, hd_pad, fp.aux_mode, fq8, fdx, faux);
  }
#endif
#if MNEMO_INT_DOT
  QuantRows qr;
  if (kc.use_int && !fast) {
    qr.q = call.take<int8_t>(n_rows_all * hd_pad);
    qr.dx = call.take<float>(n_rows_all * hd_pad / 4);
    qr.sx = call.take<float>(std::max<int64_t>(1, n_rows_all * n_off));
    qr.n_pad = hd_pad;
    qr.n_off = n_off;
    qr.group = group;
    QuantizeRows(q, hd, n_rows_all, hd, qr);
  }
#endif
  if (!kc.use_int || (fast && !fq8)) {
    qf = call.take<float>(n_rows_all * hd_pad);
    for (int64_t r = 0; r < n_rows_all; ++r) {
      std::memcpy(qf + r * hd_pad, q + r * hd, hd * sizeof(float));
      std::memset(qf + r * hd_pad + hd, 0, (hd_pad - hd) * sizeof(float));
    }
  }
  float* partials = n_split > 1 ? call.take<float>(n_split * n_rows_all * part_stride) : nullptr;

  const float neg_inf = -INFINITY;
  const int64_t n_tasks = base_tasks * n_split;
  internal::parallel_for(pool, n_tasks, [&](int64_t task, int) {
    // K/V head fastest: consecutive tasks (on one thread, or on the threads in step) read the
    // other heads of the same cache rows while those are still in cache; a row holds all heads.
    const int64_t g = task % p.n_head_kv;
    const int64_t rest = task / p.n_head_kv;
    const int64_t split = rest % n_split;
    const int64_t t0 = (rest / n_split) * tokens_per_task;
    const int64_t t1 = std::min(p.n_tokens, t0 + tokens_per_task);
    const int64_t c0 = split * cells_per_split;
    const int64_t c1 = std::min(kv.n_kv, c0 + cells_per_split);
    const int64_t n_rows = (t1 - t0) * gqa;  // row i: token t0 + i / gqa, head g * gqa + i % gqa
    const int64_t s_stride = round_up(kCellTile, nf);

    // Task scratch: row state, scores, unpacked K, dequantized V.
    const int64_t k_bytes =
        kc.use_int ? kCellTile * (2 * hd_pad + 4 * n_off) + 64 : 4 * kCellTile * hd_pad;
    const int64_t task_bytes = 4 * n_rows * (hd_pad + 2 + s_stride) + 9 * n_rows + 8 * kCellTile +
                               4 * kCellTile * hd_pad + k_bytes + 9 * hd_pad +
                               16 * 64;  // + alignment slack of every take below
    Carver ts(static_cast<uint8_t*>(
        internal::thread_scratch(internal::kSlotTask).get(static_cast<size_t>(task_bytes))));
    float* acc = ts.take<float>(n_rows * hd_pad);
    float* m = ts.take<float>(n_rows);
    float* l = ts.take<float>(n_rows);
    float* s = ts.take<float>(n_rows * s_stride);
    int64_t* act = ts.take<int64_t>(kCellTile);
    bool* row_live = ts.take<bool>(n_rows);
    float* vbuf = ts.take<float>(kCellTile * hd_pad);
    float* kf = nullptr;
    [[maybe_unused]] uint8_t* k8 = nullptr;
    [[maybe_unused]] float* kdw = nullptr;
    [[maybe_unused]] float* kcw = nullptr;
    if (kc.use_int) {
      k8 = ts.take<uint8_t>(kCellTile * hd_pad);
      kdw = ts.take<float>(kCellTile * hd_pad / 4);
      kcw = ts.take<float>(std::max<int64_t>(1, kCellTile * n_off));
    } else {
      kf = ts.take<float>(kCellTile * hd_pad);
    }
    uint8_t* tmp8 = ts.take<uint8_t>(hd_pad);
    float* tmpf = ts.take<float>(2 * hd_pad);
    int64_t* qrows = ts.take<int64_t>(n_rows);  // row i -> index of its (token, head) in q
    for (int64_t i = 0; i < n_rows; ++i) {
      qrows[i] = (t0 + i / gqa) * p.n_head + g * gqa + i % gqa;
    }
    std::fill(acc, acc + n_rows * hd_pad, 0.0f);
    std::fill(m, m + n_rows, neg_inf);
    std::fill(l, l + n_rows, 0.0f);

    const uint8_t* kbase = static_cast<const uint8_t*>(kv.k) + row_size(kv.k_type, g * hd);
    const uint8_t* vbase = static_cast<const uint8_t*>(kv.v) + row_size(kv.v_type, g * hd);
    for (int64_t cb = c0; cb < c1; cb += kCellTile) {
      const int64_t ce = std::min(c1, cb + kCellTile);
      // 1. Cells visible to some token of the task.
      int64_t n_act = 0;
      for (int64_t c = cb; c < ce; ++c) {
        bool visible = mask == nullptr;
        for (int64_t t = t0; t < t1 && !visible; ++t)
          visible = mask[t * mask_stride + c] != neg_inf;
        if (visible) act[n_act++] = c;
      }
      if (n_act == 0) continue;

      // 2. Scores s[i][k] = q_i . k_{act[k]} for every row i.
      if (fast) {
#if MNEMO_HAVE_FAST512
        const int8_t* q8p[4];
        const float* dxp[4];
        const float* auxp[4];
        const float* qfp[4];
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t ij = std::min<int64_t>(i, n_rows - 1);
          const int64_t qrow = qrows[ij];
          q8p[i] = fq8 ? fq8 + qrow * hd_pad : nullptr;
          dxp[i] = fdx ? fdx + qrow * (hd_pad / 4) : nullptr;
          auxp[i] = faux ? faux + qrow * (hd_pad / 4) : nullptr;
          qfp[i] = qf ? qf + qrow * hd_pad : nullptr;
        }
        for (int64_t k = 0; k < n_act; k += 4) {
          const uint8_t* cells[4];
          const int n_cells = static_cast<int>(std::min<int64_t>(4, n_act - k));
          for (int j = 0; j < 4; ++j) {
            cells[j] = kbase + act[k + std::min(j, n_cells - 1)] * kv.k_stride;
          }
          fp.score(cells, n_cells, hd, q8p, dxp, auxp, qfp, static_cast<int>(n_rows), s + k,
                   s_stride);
        }
#endif
      } else if (kc.use_int) {
#if MNEMO_INT_DOT
        for (int64_t k = 0; k < n_act; ++k) {
          kc.ik.unpack(kbase + act[k] * kv.k_stride, hd, hd_pad, n_off, k8 + k * hd_pad,
                       kdw + k * (hd_pad / 4), kcw + k * n_off);
        }
        IntTileArgs ta;
        ta.n_pad = hd_pad;
        ta.n_off = n_off;
        ta.y_stride = s_stride;
        for (int64_t k = 0; k < n_act; k += kTileRows) {
          ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, n_act - k));
          for (int j = 0; j < kTileRows; ++j) {
            const int64_t kj = std::min<int64_t>(k + j, n_act - 1);
            ta.w[j] = k8 + kj * hd_pad;
            ta.dw[j] = kdw + kj * (hd_pad / 4);
            ta.cw[j] = kcw + kj * n_off;
          }
          for (int64_t i = 0; i < n_rows; i += kTileCols) {
            ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, n_rows - i));
            for (int j = 0; j < kTileCols; ++j) {
              const int64_t ij = std::min<int64_t>(i + j, n_rows - 1);
              const int64_t qrow = qrows[ij];
              ta.a[j] = qr.q + qrow * hd_pad;
              ta.dx[j] = qr.dx + qrow * (hd_pad / 4);
              ta.sx[j] = qr.sx + qrow * n_off;
            }
            ta.y = s + i * s_stride + k;
            IntTile(ta, kc.ik.format.is_signed);
          }
        }
#endif
      } else {
        for (int64_t k = 0; k < n_act; ++k) {
          kc.fu(kv.k_type, kbase + act[k] * kv.k_stride, hd, hd_pad, kf + k * hd_pad);
        }
        FloatTileArgs ta;
        ta.n_pad = hd_pad;
        ta.y_stride = s_stride;
        for (int64_t k = 0; k < n_act; k += kTileRows) {
          ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, n_act - k));
          for (int j = 0; j < kTileRows; ++j) {
            ta.w[j] = kf + std::min<int64_t>(k + j, n_act - 1) * hd_pad;
          }
          for (int64_t i = 0; i < n_rows; i += kTileCols) {
            ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, n_rows - i));
            for (int j = 0; j < kTileCols; ++j) {
              const int64_t ij = std::min<int64_t>(i + j, n_rows - 1);
              const int64_t qrow = qrows[ij];
              ta.x[j] = qf + qrow * hd_pad;
            }
            ta.y = s + i * s_stride + k;
            FloatTile(ta);
          }
        }
      }

      // 3. Scale, soft-cap, mask; online softmax update; s becomes the weights p.
      const int64_t n_act_v = round_up(n_act, nf);
      for (int64_t i = 0; i < n_rows; ++i) {
        float* si = s + i * s_stride;
        const auto vscale = hn::Set(df, p.scale);
        for (int64_t k = 0; k < n_act; k += nf) {
          auto v = hn::Mul(hn::Load(df, si + k), vscale);
          if (p.softcap > 0.0f) {
            v = hn::Mul(hn::Set(df, p.softcap),
                        hn::Tanh(df, hn::Mul(v, hn::Set(df, 1.0f / p.softcap))));
          }
          hn::Store(v, df, si + k);
        }
        for (int64_t k = n_act; k < n_act_v; ++k) si[k] = neg_inf;  // lanes past the last cell
        const int64_t t = t0 + i / gqa;
        if (mask != nullptr) {
          const float* mrow = mask + t * mask_stride;
          for (int64_t k = 0; k < n_act; ++k) si[k] += mrow[act[k]];
        }
        auto vmax = hn::Set(df, neg_inf);
        for (int64_t k = 0; k < n_act_v; k += nf) vmax = hn::Max(vmax, hn::Load(df, si + k));
        const float tile_max = hn::GetLane(hn::MaxOfLanes(df, vmax));
        row_live[i] = tile_max != neg_inf;
        if (!row_live[i]) {
          std::fill(si, si + n_act, 0.0f);  // weights 0 for the fused V accumulation
          continue;
        }
        const float m_new = std::max(m[i], tile_max);
        const float alpha = std::exp(m[i] - m_new);  // 0 while m[i] is -inf (acc is 0 then)
        const auto vm = hn::Set(df, m_new);
        auto vsum = hn::Zero(df);
        for (int64_t k = 0; k < n_act_v; k += nf) {
          const auto e = hn::Exp(df, hn::Sub(hn::Load(df, si + k), vm));  // exp(-inf) = 0
          hn::Store(e, df, si + k);
          vsum = hn::Add(vsum, e);
        }
        l[i] = l[i] * alpha + hn::GetLane(hn::SumOfLanes(df, vsum));
        m[i] = m_new;
        if (alpha != 1.0f) {
          float* ai = acc + i * hd_pad;
          const auto va = hn::Set(df, alpha);
          for (int64_t d = 0; d < hd_pad; d += nf) {
            hn::Store(hn::Mul(hn::Load(df, ai + d), va), df, ai + d);
          }
        }
      }

      // 4. acc_i += sum_k p[i][k] * v_{act[k]}.
#if MNEMO_HAVE_FAST512
      if (fast && fp.vacc != nullptr) {
        const uint8_t* vcells[kCellTile];
        for (int64_t k = 0; k < n_act; ++k) vcells[k] = vbase + act[k] * kv.v_stride;
        float* accp[4];
        for (int64_t i = 0; i < n_rows; ++i) accp[i] = acc + i * hd_pad;
        fp.vacc(vcells, n_act, hd, s, s_stride, static_cast<int>(n_rows), accp);
        continue;
      }
#endif
      for (int64_t k = 0; k < n_act; ++k) {
        DequantSegment(vc, vbase + act[k] * kv.v_stride, hd, hd_pad, vbuf + k * hd_pad, tmp8, tmpf);
      }
      for (int64_t i = 0; i < n_rows; ++i) {
        if (!row_live[i]) continue;
        const float* si = s + i * s_stride;
        float* ai = acc + i * hd_pad;
        int64_t d = 0;
        for (; d + 4 * nf <= hd_pad; d += 4 * nf) {
          auto a0 = hn::Load(df, ai + d), a1 = hn::Load(df, ai + d + nf);
          auto a2 = hn::Load(df, ai + d + 2 * nf), a3 = hn::Load(df, ai + d + 3 * nf);
          for (int64_t k = 0; k < n_act; ++k) {
            const auto pk = hn::Set(df, si[k]);
            const float* vk = vbuf + k * hd_pad + d;
            a0 = hn::MulAdd(pk, hn::Load(df, vk), a0);
            a1 = hn::MulAdd(pk, hn::Load(df, vk + nf), a1);
            a2 = hn::MulAdd(pk, hn::Load(df, vk + 2 * nf), a2);
            a3 = hn::MulAdd(pk, hn::Load(df, vk + 3 * nf), a3);
          }
          hn::Store(a0, df, ai + d);
          hn::Store(a1, df, ai + d + nf);
          hn::Store(a2, df, ai + d + 2 * nf);
          hn::Store(a3, df, ai + d + 3 * nf);
        }
        for (; d < hd_pad; d += nf) {
          auto a0 = hn::Load(df, ai + d);
          for (int64_t k = 0; k < n_act; ++k) {
            a0 = hn::MulAdd(hn::Set(df, si[k]), hn::Load(df, vbuf + k * hd_pad + d), a0);
          }
          hn::Store(a0, df, ai + d);
        }
      }
    }

    // Results: final rows, or this range's (acc, m, l) for the merge.
    for (int64_t i = 0; i < n_rows; ++i) {
      const int64_t row = (t0 + i / gqa) * p.n_head + g * gqa + i % gqa;
      const float* ai = acc + i * hd_pad;
      if (n_split == 1) {
        float* o = out + row * hd;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int64_t d = 0; d < hd; ++d) o[d] = ai[d] * inv;
      } else {
        float* part = partials + (split * n_rows_all + row) * part_stride;
        std::memcpy(part, ai, hd * sizeof(float));
        part[hd_pad] = m[i];
        part[hd_pad + 1] = l[i];
      }
    }
  });

  if (n_split > 1) {
    // Merge the ranges: m = max m_s, l = sum l_s e^(m_s - m), out = sum acc_s e^(m_s - m) / l.
    internal::parallel_for(pool, ceil_div(n_rows_all, 16), [&](int64_t task, int) {
      const int64_t r1 = std::min(n_rows_all, (task + 1) * 16);
      for (int64_t row = task * 16; row < r1; ++row) {
        float mx = neg_inf;
        for (int64_t sp = 0; sp < n_split; ++sp) {
          mx = std::max(mx, partials[(sp * n_rows_all + row) * part_stride + hd_pad]);
        }
        float* o = out + row * hd;
        std::fill(o, o + hd, 0.0f);
        if (mx == neg_inf) continue;
        float lsum = 0.0f;
        for (int64_t sp = 0; sp < n_split; ++sp) {
          const float* part = partials + (sp * n_rows_all + row) * part_stride;
          if (part[hd_pad] == neg_inf) continue;
          const float w = std::exp(part[hd_pad] - mx);
          lsum += part[hd_pad + 1] * w;
          for (int64_t d = 0; d < hd; ++d) o[d] += part[d] * w;
        }
        const float inv = 1.0f / lsum;
        for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
      }
    });
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_ATTENTION_INL_H_
