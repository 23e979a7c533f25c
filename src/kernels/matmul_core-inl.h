// The matmul core, per Highway target: activation quantization, the register-tile micro-kernels
// (integer and float), and the driver that splits work over threads and tiles it for cache.
// Included (through foreach_target.h) only by matmul_core.cc, which is where these non-inline
// functions are defined once per target; toggle guard below.
//
// Work decomposition of y[n_tokens x n_out] = x W^T:
//   - few tokens (decoding): the weights are read once and the work is memory-bound, so threads
//     split the rows finely (about 8 tasks per thread, balanced by the pool's atomic counter)
//     and each task unpacks kTileRows rows at a time into L1 and dots them with every token;
//   - many tokens (prompt): a task is up to 64 rows x a range of tokens. Its rows are unpacked
//     once (2.25 bytes per weight: u8 + a float scale per 4 + offsets) into L2, then for every
//     block of 64 tokens (their quantized rows stay in L2) each kTileRows x kTileCols register
//     tile streams over the row length: each weight vector is used kTileCols times and each
//     activation vector kTileRows times per load.

#if defined(MNEMO_KERNELS_MATMUL_CORE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_MATMUL_CORE_INL_H_
#undef MNEMO_KERNELS_MATMUL_CORE_INL_H_
#else
#define MNEMO_KERNELS_MATMUL_CORE_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/matmul-inl.h"
#include "kernels/quant_unpack-inl.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

namespace core_detail {

using internal::ceil_div;
using internal::kPadElems;
using internal::round_up;

/// Tokens per cache block in the prompt path: their quantized rows are reused by every row tile
/// of the task, so they should stay in L2 (64 x 1536 x ~2 bytes = 200 KB at the widest shape).
inline constexpr int64_t kTokenBlock = 64;
/// Rows per task in the prompt path.
inline constexpr int64_t kPromptRows = 64;

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
  int64_t used() const { return used_; }

 private:
  uint8_t* base_;
  int64_t used_ = 0;
};

/// How a matmul is cut into tasks.
struct Plan {
  int64_t rows_per_task = 0;
  int64_t n_row_tasks = 0;
  int64_t tokens_per_task = 0;
  int64_t n_token_tasks = 0;
  int64_t rows_per_unpack = 0;  // rows unpacked at a time inside a task
};

inline Plan MakePlan(int64_t n_out, int64_t n_tokens, int n_threads) {
  Plan p;
  if (n_tokens < 2 * kTileCols) {
    p.rows_per_task = std::max<int64_t>(
        2 * kTileRows, round_up(ceil_div(n_out, 8 * static_cast<int64_t>(n_threads)), kTileRows));
    p.rows_per_unpack = kTileRows;
    p.n_row_tasks = ceil_div(n_out, p.rows_per_task);
    p.n_token_tasks = 1;
    p.tokens_per_task = n_tokens;
  } else {
    p.rows_per_task = std::min<int64_t>(kPromptRows, round_up(n_out, kTileRows));
    p.rows_per_unpack = p.rows_per_task;
    p.n_row_tasks = ceil_div(n_out, p.rows_per_task);
    // Few row tasks (narrow outputs): split the tokens too, in chunks of >= 16 tokens.
    const int64_t want = ceil_div(4 * static_cast<int64_t>(n_threads), p.n_row_tasks);
    p.n_token_tasks = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, n_tokens / 16));
    p.tokens_per_task = round_up(ceil_div(n_tokens, p.n_token_tasks), kTileCols);
    p.n_token_tasks = ceil_div(n_tokens, p.tokens_per_task);
  }
  return p;
}

}  // namespace core_detail

/// y[c * y_stride + r] = sum of the lanes of acc[r][c], for r < n_rows, c < n_cols. Always the
/// same reduction tree (Reduce4's; rows past n_rows hold copies of valid rows and are dropped),
/// so an element's sum does not depend on how many rows share its tile.
template <int kC, class D>
HWY_INLINE void StoreTile(D d, const hn::Vec<D> (&acc)[kTileRows][kC], int n_rows, int n_cols,
                          float* y, int64_t y_stride) {
#if HWY_TARGET != HWY_SCALAR
  static_assert(kTileRows == 4, "the reduction tree takes 4 rows");
  for (int c = 0; c < n_cols; ++c) {
    if (n_rows == 4) {
      Reduce4(d, acc[0][c], acc[1][c], acc[2][c], acc[3][c], y + c * y_stride);
    } else {
      float tmp[4];
      Reduce4(d, acc[0][c], acc[1][c], acc[2][c], acc[3][c], tmp);
      for (int r = 0; r < n_rows; ++r) y[c * y_stride + r] = tmp[r];
    }
  }
#else
  for (int c = 0; c < n_cols; ++c) {
    for (int r = 0; r < n_rows; ++r) y[c * y_stride + r] = ReduceSum(d, acc[r][c]);
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Float micro-kernel and driver

template <int kC>
HWY_NOINLINE void FloatTileT(const FloatTileArgs& t) {
  const hn::ScalableTag<float> df;
  const size_t nf = hn::Lanes(df);
  using VF = hn::Vec<decltype(df)>;
  VF acc[kTileRows][kC];
  for (int r = 0; r < kTileRows; ++r) {
    for (int c = 0; c < kC; ++c) acc[r][c] = hn::Zero(df);
  }
  for (int64_t i = 0; i < t.n_pad; i += nf) {
    VF w[kTileRows];
    for (int r = 0; r < kTileRows; ++r) w[r] = hn::Load(df, t.w[r] + i);
    for (int c = 0; c < kC; ++c) {
      const VF x = hn::Load(df, t.x[c] + i);
      for (int r = 0; r < kTileRows; ++r) acc[r][c] = hn::MulAdd(w[r], x, acc[r][c]);
    }
  }
  StoreTile<kC>(df, acc, t.n_rows, t.n_cols, t.y, t.y_stride);
}

void FloatTile(const FloatTileArgs& t) {
  static_assert(kTileCols == 2 || kTileCols == 4, "tile widths 2 and 4 are instantiated");
  switch (t.n_cols) {
    case 1:
      return FloatTileT<1>(t);
    case 2:
      return FloatTileT<2>(t);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    case 3:
      return FloatTileT<3>(t);
    case 4:
      return FloatTileT<4>(t);
#endif
    default:
      CHECK(false) << "bad tile width " << t.n_cols;
  }
}

void UnpackRowRef(GgmlType type, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  const Status st = dequantize_row(type, row, out, n_in);
  CHECK(st.ok()) << st.to_string();
  if (n_pad > n_in) std::memset(out + n_in, 0, (n_pad - n_in) * sizeof(float));
}

FloatUnpackFn GetFloatUnpack(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return &UnpackRowF32;
    case GgmlType::F16:
      return &UnpackRowF16;
    case GgmlType::BF16:
      return &UnpackRowBF16;
    default:
      return &UnpackRowRef;
  }
}

void MatmulFloat(const internal::MatmulArgs& a, FloatUnpackFn unpack) {
  using namespace core_detail;  // NOLINT(build/namespaces)
  const int64_t n_pad = round_up(a.n_in, kPadElems);
  const int64_t n_tokens = a.n_tokens;
  // x, padded with zeros to n_pad: [n_tokens x n_pad].
  Carver call(static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(n_tokens * n_pad * sizeof(float) + 64)));
  float* xp = call.take<float>(n_tokens * n_pad);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::memcpy(xp + t * n_pad, a.x + t * a.x_stride, a.n_in * sizeof(float));
    std::memset(xp + t * n_pad + a.n_in, 0, (n_pad - a.n_in) * sizeof(float));
  }
  const Plan plan = MakePlan(a.n_out, n_tokens, internal::n_threads_of(a.pool));
  internal::parallel_for(a.pool, plan.n_row_tasks * plan.n_token_tasks, [&](int64_t task, int) {
    const int64_t r0 = (task % plan.n_row_tasks) * plan.rows_per_task;
    const int64_t r1 = std::min(a.n_out, r0 + plan.rows_per_task);
    const int64_t t0 = (task / plan.n_row_tasks) * plan.tokens_per_task;
    const int64_t t1 = std::min(n_tokens, t0 + plan.tokens_per_task);
    float* wf = static_cast<float*>(internal::thread_scratch(internal::kSlotRows)
                                        .get(plan.rows_per_unpack * n_pad * sizeof(float)));
    for (int64_t rs = r0; rs < r1; rs += plan.rows_per_unpack) {
      const int64_t nr = std::min(plan.rows_per_unpack, r1 - rs);
      for (int64_t i = 0; i < nr; ++i) {
        unpack(a.type, a.w + (rs + i) * a.w_row_bytes, a.n_in, n_pad, wf + i * n_pad);
      }
      for (int64_t tb = t0; tb < t1; tb += kTokenBlock) {
        const int64_t te = std::min(t1, tb + kTokenBlock);
        for (int64_t r = 0; r < nr; r += kTileRows) {
          FloatTileArgs ta;
          ta.n_pad = n_pad;
          ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, nr - r));
          for (int i = 0; i < kTileRows; ++i) {
            ta.w[i] = wf + std::min<int64_t>(r + i, nr - 1) * n_pad;
          }
          ta.y_stride = a.y_stride;
          for (int64_t t = tb; t < te; t += kTileCols) {
            ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, te - t));
            for (int j = 0; j < kTileCols; ++j) {
              ta.x[j] = xp + std::min<int64_t>(t + j, te - 1) * n_pad;
            }
            ta.y = a.y + t * a.y_stride + rs + r;
            FloatTile(ta);
          }
        }
      }
    }
  });
}

#if MNEMO_INT_DOT

// ---------------------------------------------------------------------------------------------
// Activation quantization

void QuantizeRows(const float* x, int64_t x_stride, int64_t n_rows, int64_t n_in,
                  const QuantRows& out) {
  const DF32 df;
  const hn::Rebind<int32_t, DF32> di;
  const hn::Rebind<int8_t, DF32> d8;
  const size_t nf = hn::Lanes(df);
  const int64_t n_pad = out.n_pad;
  const int group = out.group;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* q = out.q + r * n_pad;
    float* dx = out.dx + r * (n_pad / 4);
    float* sx = out.sx + r * out.n_off;
    if (group != 0) std::memset(sx, 0, out.n_off * sizeof(float));
    for (int64_t b = 0; b < n_in / 32; ++b) {
      const float* xb = xr + 32 * b;
      auto vmax = hn::Zero(df);
      for (size_t j = 0; j < 32; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
      const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      const float d = amax / 127.0f;
      const auto inv = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
      for (size_t j = 0; j < 32; j += nf) {
        const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), inv));
        hn::StoreU(hn::DemoteTo(d8, qi), d8, q + 32 * b + j);
        if (group != 0) {
          sx[(32 * b + j) / group] += d * static_cast<float>(ReduceSum(di, qi));
        }
      }
      StoreScale8(d, dx + 8 * b);
    }
    if (n_pad > n_in) {
      std::memset(q + n_in, 0, n_pad - n_in);
      std::memset(dx + n_in / 4, 0, (n_pad - n_in) / 4 * sizeof(float));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Integer micro-kernel and driver

template <int kC, bool kSigned>
MNEMO_VNNI_ATTR HWY_NOINLINE void IntTileT(const IntTileArgs& t) {
  const DU8 du8;
  const DI8 di8;
  const DF32 df;
  const size_t n8 = hn::Lanes(du8);
  const size_t nf = hn::Lanes(df);
  using VF = hn::Vec<DF32>;
  VF acc[kTileRows][kC];
  for (int r = 0; r < kTileRows; ++r) {
    for (int c = 0; c < kC; ++c) acc[r][c] = hn::Zero(df);
  }
  for (int64_t i = 0; i < t.n_pad; i += n8) {
    hn::Vec<DU8> w[kTileRows];
    VF dw[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      w[r] = hn::Load(du8, t.w[r] + i);
      dw[r] = hn::Load(df, t.dw[r] + i / 4);
    }
    for (int c = 0; c < kC; ++c) {
      const auto a = hn::Load(di8, t.a[c] + i);
      const VF dx = hn::Load(df, t.dx[c] + i / 4);
      for (int r = 0; r < kTileRows; ++r) {
        const VF prod = hn::ConvertTo(df, DotQuads<kSigned>(w[r], a));
        acc[r][c] = hn::MulAdd(prod, hn::Mul(dw[r], dx), acc[r][c]);
      }
    }
  }
  for (int64_t j = 0; j < t.n_off; j += nf) {
    for (int c = 0; c < kC; ++c) {
      const VF s = hn::Load(df, t.sx[c] + j);
      for (int r = 0; r < kTileRows; ++r) {
        acc[r][c] = hn::MulAdd(hn::Load(df, t.cw[r] + j), s, acc[r][c]);
      }
    }
  }
  StoreTile<kC>(df, acc, t.n_rows, t.n_cols, t.y, t.y_stride);
}

template <bool kSigned>
void IntTileCols(const IntTileArgs& t) {
  switch (t.n_cols) {
    case 1:
      return IntTileT<1, kSigned>(t);
    case 2:
      return IntTileT<2, kSigned>(t);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    case 3:
      return IntTileT<3, kSigned>(t);
    case 4:
      return IntTileT<4, kSigned>(t);
#endif
    default:
      CHECK(false) << "bad tile width " << t.n_cols;
  }
}

void IntTile(const IntTileArgs& t, bool is_signed) {
  if constexpr (kVnni) {
    DCHECK(!is_signed);
    IntTileCols<false>(t);
  } else {
    if (is_signed) {
      IntTileCols<true>(t);
    } else {
      IntTileCols<false>(t);
    }
  }
}

void MatmulInt(const internal::MatmulArgs& a, const IntKernel& k) {
  using namespace core_detail;  // NOLINT(build/namespaces)
  const int64_t n_pad = round_up(a.n_in, kPadElems);
  const int group = k.format.group;
  const int64_t n_off = OffsetLen(n_pad, group);
  const int64_t n_tokens = a.n_tokens;

  // 1. Quantize the activations once: [n_tokens] rows of (q[n_pad], dx[n_pad/4], sx[n_off]).
  const int64_t call_bytes = n_tokens * (n_pad + n_pad + n_off * 4) + 4 * 64;
  Carver call(static_cast<uint8_t*>(
      internal::thread_scratch(internal::kSlotCall).get(static_cast<size_t>(call_bytes))));
  QuantRows qr;
  qr.q = call.take<int8_t>(n_tokens * n_pad);
  qr.dx = call.take<float>(n_tokens * n_pad / 4);
  qr.sx = call.take<float>(std::max<int64_t>(1, n_tokens * n_off));
  qr.n_pad = n_pad;
  qr.n_off = n_off;
  qr.group = group;
  constexpr int64_t kQuantChunk = 16;
  if (a.pool != nullptr && n_tokens >= 2 * kQuantChunk) {
    internal::parallel_for(a.pool, ceil_div(n_tokens, kQuantChunk), [&](int64_t task, int) {
      const int64_t t0 = task * kQuantChunk;
      const int64_t nt = std::min(kQuantChunk, n_tokens - t0);
      QuantRows part = qr;
      part.q += t0 * n_pad;
      part.dx += t0 * n_pad / 4;
      part.sx += t0 * n_off;
      QuantizeRows(a.x + t0 * a.x_stride, a.x_stride, nt, a.n_in, part);
    });
  } else {
    QuantizeRows(a.x, a.x_stride, n_tokens, a.n_in, qr);
  }

  // 2. Tasks of rows x tokens.
  const Plan plan = MakePlan(a.n_out, n_tokens, internal::n_threads_of(a.pool));
  const bool is_signed = k.format.is_signed;
  internal::parallel_for(a.pool, plan.n_row_tasks * plan.n_token_tasks, [&](int64_t task, int) {
    const int64_t r0 = (task % plan.n_row_tasks) * plan.rows_per_task;
    const int64_t r1 = std::min(a.n_out, r0 + plan.rows_per_task);
    const int64_t t0 = (task / plan.n_row_tasks) * plan.tokens_per_task;
    const int64_t t1 = std::min(n_tokens, t0 + plan.tokens_per_task);
    const int64_t ru = plan.rows_per_unpack;
    Carver rows(static_cast<uint8_t*>(internal::thread_scratch(internal::kSlotRows)
                                          .get(ru * (n_pad + n_pad + n_off * 4) + 4 * 64)));
    uint8_t* w8 = rows.take<uint8_t>(ru * n_pad);
    float* dw = rows.take<float>(ru * n_pad / 4);
    float* cw = rows.take<float>(std::max<int64_t>(1, ru * n_off));
    for (int64_t rs = r0; rs < r1; rs += ru) {
      const int64_t nr = std::min(ru, r1 - rs);
      for (int64_t i = 0; i < nr; ++i) {
        k.unpack(a.w + (rs + i) * a.w_row_bytes, a.n_in, n_pad, n_off, w8 + i * n_pad,
                 dw + i * (n_pad / 4), cw + i * n_off);
      }
      for (int64_t tb = t0; tb < t1; tb += kTokenBlock) {
        const int64_t te = std::min(t1, tb + kTokenBlock);
        for (int64_t r = 0; r < nr; r += kTileRows) {
          IntTileArgs ta;
          ta.n_pad = n_pad;
          ta.n_off = n_off;
          ta.n_rows = static_cast<int>(std::min<int64_t>(kTileRows, nr - r));
          for (int i = 0; i < kTileRows; ++i) {
            const int64_t ri = std::min<int64_t>(r + i, nr - 1);
            ta.w[i] = w8 + ri * n_pad;
            ta.dw[i] = dw + ri * (n_pad / 4);
            ta.cw[i] = cw + ri * n_off;
          }
          ta.y_stride = a.y_stride;
          for (int64_t t = tb; t < te; t += kTileCols) {
            ta.n_cols = static_cast<int>(std::min<int64_t>(kTileCols, te - t));
            for (int j = 0; j < kTileCols; ++j) {
              const int64_t tj = std::min<int64_t>(t + j, te - 1);
              ta.a[j] = qr.q + tj * n_pad;
              ta.dx[j] = qr.dx + tj * (n_pad / 4);
              ta.sx[j] = qr.sx + tj * n_off;
            }
            ta.y = a.y + t * a.y_stride + rs + r;
            IntTile(ta, is_signed);
          }
        }
      }
    }
  });
}

bool GetIntKernel(GgmlType type, IntKernel* k) {
  switch (type) {
    case GgmlType::Q4_0:
      *k = {&UnpackRowQ4_0, {32, false}};
      return true;
    case GgmlType::Q4_1:
      *k = {&UnpackRowQ4_1, {32, false}};
      return true;
    case GgmlType::Q5_0:
      *k = {&UnpackRowQ5_0, {32, false}};
      return true;
    case GgmlType::Q5_1:
      *k = {&UnpackRowQ5_1, {32, false}};
      return true;
    case GgmlType::Q8_0:
      *k = {&UnpackRowQ8_0, kSignedFormat};
      return true;
    case GgmlType::IQ4_NL:
      *k = {&UnpackRowIQ4_NL, kSignedFormat};
      return true;
    case GgmlType::Q4_K:
      *k = {&UnpackRowQ4_K, {32, false}};
      return true;
    case GgmlType::Q5_K:
      *k = {&UnpackRowQ5_K, {32, false}};
      return true;
    case GgmlType::Q6_K:
      *k = {&UnpackRowQ6_K, {16, false}};
      return true;
    default:
      return false;
  }
}

#endif  // MNEMO_INT_DOT

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_MATMUL_CORE_INL_H_
