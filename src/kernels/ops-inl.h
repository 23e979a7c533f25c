// Per-target SIMD code of the small ops: RMSNorm, softmax, SiLU / GELU gates, elementwise ops,
// soft-capping and RoPE. Included (through foreach_target.h) only by ops.cc; toggle guard below.
// Each function handles any n: full vectors first, then a scalar tail with the same formula.

#if defined(MNEMO_KERNELS_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MNEMO_KERNELS_OPS_INL_H_
#undef MNEMO_KERNELS_OPS_INL_H_
#else
#define MNEMO_KERNELS_OPS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "kernels/simd-inl.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"
#include "quant/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- scalar forms (tails), the same formulas as the vector code ------------------------------

inline float SigmoidScalar(float x) {
  const float e = std::exp(-std::fabs(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
// 0.5 (1 + tanh(z)) == sigmoid(2 z): the sigmoid form has no cancellation for g << 0, where
// 1 + tanh(z) loses all its digits.
inline float GeluScalar(float g) {
  return g * SigmoidScalar(2.0f * kGeluK * (g + kGeluC * g * g * g));
}

// ---- vector forms ----------------------------------------------------------------------------

/// 1 / (1 + exp(-x)) without overflow: exp only ever sees -|x| <= 0.
HWY_INLINE VF Sigmoid(DF d, VF x) {
  const VF e = hn::Exp(d, hn::Neg(hn::Abs(x)));
  const VF inv = hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), e));
  return hn::IfThenElse(hn::Ge(x, hn::Zero(d)), inv, hn::Mul(e, inv));
}

/// GELU, tanh approximation, as g * sigmoid(2 z) (see GeluScalar).
HWY_INLINE VF Gelu(DF d, VF g) {
  const VF z2 = hn::Mul(hn::Set(d, 2.0f * kGeluK),
                        hn::MulAdd(hn::Mul(hn::Set(d, kGeluC), g), hn::Mul(g, g), g));
  return hn::Mul(g, Sigmoid(d, z2));
}

void RmsNorm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y) {
  const DF d;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    VF acc0 = hn::Zero(d), acc1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * nf <= n; i += 2 * nf) {
      const VF a = hn::LoadU(d, xr + i), b = hn::LoadU(d, xr + i + nf);
      acc0 = hn::MulAdd(a, a, acc0);
      acc1 = hn::MulAdd(b, b, acc1);
    }
    float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
    for (; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    const VF vinv = hn::Set(d, inv);
    i = 0;
    for (; i + nf <= n; i += nf) {
      VF v = hn::Mul(hn::LoadU(d, xr + i), vinv);
      if (weight) v = hn::Mul(v, hn::LoadU(d, weight + i));
      hn::StoreU(v, d, yr + i);
    }
    for (; i < n; ++i) yr[i] = xr[i] * inv * (weight ? weight[i] : 1.0f);
  }
}

void Softmax(float* x, int64_t n_rows, int64_t n) {
  const DF d;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(d));
  const VF neg_inf = hn::Set(d, -INFINITY);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * n;
    VF vmax = neg_inf;
    int64_t i = 0;
    for (; i + nf <= n; i += nf) vmax = hn::Max(vmax, hn::LoadU(d, row + i));
    float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; i < n; ++i) mx = std::max(mx, row[i]);
    if (mx == -INFINITY) {
      std::fill(row, row + n, 0.0f);
      continue;
    }
    // exp(-inf - mx) is 0 in hwy's Exp (arguments below -104 give 0).
    const VF vmx = hn::Set(d, mx);
    VF vsum = hn::Zero(d);
    i = 0;
    for (; i + nf <= n; i += nf) {
      const VF e = hn::Exp(d, hn::Sub(hn::LoadU(d, row + i), vmx));
      hn::StoreU(e, d, row + i);
      vsum = hn::Add(vsum, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    for (; i < n; ++i) {
      row[i] = std::exp(row[i] - mx);
      sum += row[i];
    }
    const float inv = 1.0f / sum;
    const VF vinv = hn::Set(d, inv);
    i = 0;
    for (; i + nf <= n; i += nf) hn::StoreU(hn::Mul(hn::LoadU(d, row + i), vinv), d, row + i);
    for (; i < n; ++i) row[i] *= inv;
  }
}

/// out[i] = f(a[i], b[i]) with vector form fv and scalar form fs.
template <class FV, class FS>
HWY_INLINE void Binary(const float* a, const float* b, int64_t n, float* out, FV fv, FS fs) {
  const DF d;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nf <= n; i += nf) {
    hn::StoreU(fv(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = fs(a[i], b[i]);
}

/// out[i] = f(x[i]).
template <class FV, class FS>
HWY_INLINE void Unary(const float* x, int64_t n, float* out, FV fv, FS fs) {
  const DF d;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nf <= n; i += nf) hn::StoreU(fv(d, hn::LoadU(d, x + i)), d, out + i);
  for (; i < n; ++i) out[i] = fs(x[i]);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  Binary(
      gate, up, n, out,
      [](DF d, VF g, VF u) HWY_ATTR { return hn::Mul(hn::Mul(g, Sigmoid(d, g)), u); },
      [](float g, float u) { return g * SigmoidScalar(g) * u; });
}

void GeluMul(const float* gate, const float* up, int64_t n, float* out) {
  Binary(
      gate, up, n, out, [](DF d, VF g, VF u) HWY_ATTR { return hn::Mul(Gelu(d, g), u); },
      [](float g, float u) { return GeluScalar(g) * u; });
}

void Silu(const float* x, int64_t n, float* out) {
  Unary(
      x, n, out, [](DF d, VF g) HWY_ATTR { return hn::Mul(g, Sigmoid(d, g)); },
      [](float g) { return g * SigmoidScalar(g); });
}

void GeluOp(const float* x, int64_t n, float* out) {
  Unary(
      x, n, out, [](DF d, VF g) HWY_ATTR { return Gelu(d, g); },
      [](float g) { return GeluScalar(g); });
}

void AddOp(const float* a, const float* b, int64_t n, float* out) {
  Binary(
      a, b, n, out, [](DF, VF u, VF v) HWY_ATTR { return hn::Add(u, v); },
      [](float u, float v) { return u + v; });
}

void MulOp(const float* a, const float* b, int64_t n, float* out) {
  Binary(
      a, b, n, out, [](DF, VF u, VF v) HWY_ATTR { return hn::Mul(u, v); },
      [](float u, float v) { return u * v; });
}

void ScaleOp(float* x, int64_t n, float s) {
  Unary(
      x, n, x, [s](DF d, VF v) HWY_ATTR { return hn::Mul(v, hn::Set(d, s)); },
      [s](float v) { return v * s; });
}

void SoftcapOp(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  Unary(
      x, n, x,
      [cap, inv](DF d, VF v)
          HWY_ATTR { return hn::Mul(hn::Set(d, cap), hn::Tanh(d, hn::Mul(v, hn::Set(d, inv)))); },
      [cap, inv](float v) { return cap * std::tanh(v * inv); });
}

// ---- RoPE ------------------------------------------------------------------------------------
// A table row (one token) is C[n_dims] then S[n_dims], so that every rotated vector is
//   out = x * C + partner(x) * S
// with partner(x) the other element of each pair: normal mode pairs (2i, 2i+1) and
//   C = [c0, c0, c1, c1, ...], S = [-s0, s0, -s1, s1, ...];
// NeoX mode pairs (i, i + h), h = n_dims / 2, and
//   C = [c0 .. c_{h-1}, c0 .. c_{h-1}], S = [-s0 .. -s_{h-1}, s0 .. s_{h-1}].

/// Rotates one head vector v[0, n_dims) with one table row.
HWY_INLINE void RopeHead(const RopeParams& p, const float* HWY_RESTRICT table,
                         float* HWY_RESTRICT v) {
  const float* c = table;
  const float* s = table + p.n_dims;
  const int64_t n = p.n_dims;
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const DF d;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(d));
  if (p.mode == RopeMode::kNormal) {
    for (; i + nf <= n; i += nf) {
      const VF x = hn::LoadU(d, v + i);
      const VF out =
          hn::MulAdd(hn::Reverse2(d, x), hn::LoadU(d, s + i), hn::Mul(x, hn::LoadU(d, c + i)));
      hn::StoreU(out, d, v + i);
    }
  } else {
    const int64_t h = n / 2;
    for (; i + nf <= h; i += nf) {
      const VF lo = hn::LoadU(d, v + i);
      const VF hi = hn::LoadU(d, v + h + i);
      hn::StoreU(hn::MulAdd(hi, hn::LoadU(d, s + i), hn::Mul(lo, hn::LoadU(d, c + i))), d, v + i);
      hn::StoreU(hn::MulAdd(lo, hn::LoadU(d, s + h + i), hn::Mul(hi, hn::LoadU(d, c + h + i))), d,
                 v + h + i);
    }
    if (i < h) {  // scalar tail of both halves
      for (; i < h; ++i) {
        const float a = v[i], b = v[h + i];
        v[i] = a * c[i] + b * s[i];
        v[h + i] = b * c[h + i] + a * s[h + i];
      }
    }
    return;
  }
#endif
  if (p.mode == RopeMode::kNormal) {
    for (i -= i % 2; i < n; i += 2) {
      const float a = v[i], b = v[i + 1];
      v[i] = a * c[i] + b * s[i];
      v[i + 1] = b * c[i + 1] + a * s[i + 1];
    }
  } else {
    const int64_t h = n / 2;
    for (i = 0; i < h; ++i) {
      const float a = v[i], b = v[h + i];
      v[i] = a * c[i] + b * s[i];
      v[h + i] = b * c[h + i] + a * s[h + i];
    }
  }
}

void RopeApply(const RopeParams& p, const float* table, int64_t n_tokens, int64_t n_head,
               int64_t head_dim, float* x, int64_t x_stride) {
  const int64_t tf = rope_table_floats(p);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h)
      RopeHead(p, table + t * tf, x + t * x_stride + h * head_dim);
  }
}

void RopeShift(const RopeParams& p, GgmlType type, void* rows, size_t row_stride, int64_t n_rows,
               int64_t n_head_kv, int64_t head_dim, const int32_t* delta, ThreadPool* pool) {
  const int64_t n = n_head_kv * head_dim;
  constexpr int64_t kRowsPerTask = 16;
  internal::parallel_for(pool, internal::ceil_div(n_rows, kRowsPerTask), [&](int64_t task, int) {
    std::vector<float> buf(n);
    std::vector<float> table(rope_table_floats(p));
    const int64_t r1 = std::min(n_rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < r1; ++r) {
      if (delta[r] == 0) continue;
      uint8_t* row = static_cast<uint8_t*>(rows) + r * row_stride;
      Status st = dequantize_row(type, row, buf.data(), n);
      CHECK(st.ok()) << "rope_shift: " << st.to_string();
      internal::rope_table_row(p, static_cast<double>(delta[r]), table.data());
      for (int64_t h = 0; h < n_head_kv; ++h) RopeHead(p, table.data(), buf.data() + h * head_dim);
      st = quantize_row(type, buf.data(), row, n);
      CHECK(st.ok()) << "rope_shift: " << st.to_string();
    }
  });
}

// ---- float rows -> cache rows ------------------------------------------------------------------
// Bit-exact twins of quant's reference quantize_row for the common cache types (the test
// compares bytes); other types call the reference itself.

#if HWY_TARGET != HWY_SCALAR
using DF16 = hn::CappedTag<float, 16>;  // one block of 32 = 2, 4 or 8 vectors

/// roundf(v) for |v| < 2^23 (ties away from zero), as quant's round_half_away.
HWY_INLINE hn::Vec<DF16> RoundHalfAway(DF16 d, hn::Vec<DF16> v) {
  const auto a = hn::Abs(v);
  const auto t = hn::Trunc(a);
  const auto r =
      hn::Add(t, hn::IfThenElseZero(hn::Ge(hn::Sub(a, t), hn::Set(d, 0.5f)), hn::Set(d, 1.0f)));
  return hn::CopySign(r, v);
}

HWY_INLINE void RowToQ8_0(const float* x, int64_t n, uint8_t* dst) {
  const DF16 df;
  const hn::Rebind<int32_t, DF16> di;
  const hn::Rebind<int8_t, DF16> d8;
  const size_t nf = hn::Lanes(df);
  block_q8_0* b = reinterpret_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    auto vmax = hn::Zero(df);
    for (size_t j = 0; j < 32; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    const auto vid = hn::Set(df, id);
    const auto lo = hn::Set(df, -127.0f), hi = hn::Set(df, 127.0f);
    for (size_t j = 0; j < 32; j += nf) {
      const auto v = hn::Min(hn::Max(hn::Mul(hn::LoadU(df, x + j), vid), lo), hi);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, RoundHalfAway(df, v))), d8, b[i].qs + j);
    }
  }
}

HWY_INLINE void RowToQ4_0(const float* x, int64_t n, uint8_t* dst) {
  const DF16 df;
  const hn::Rebind<int32_t, DF16> di;
  const hn::Rebind<uint8_t, DF16> d8;
  const size_t nf = hn::Lanes(df);
  block_q4_0* b = reinterpret_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    auto vmax = hn::Zero(df);
    for (size_t j = 0; j < 32; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    // The signed value of largest magnitude, first in element order (quant's signed_absmax).
    float max = 0.0f;
    if (amax > 0.0f) {
      for (size_t j = 0; j < 32; j += nf) {
        const intptr_t k =
            hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, x + j)), hn::Set(df, amax)));
        if (k >= 0) {
          max = x[j + static_cast<size_t>(k)];
          break;
        }
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    const auto vid = hn::Set(df, id);
    const auto half = hn::Set(df, 8.5f), zero = hn::Zero(df), fifteen = hn::Set(df, 15.0f);
    for (size_t j = 0; j < 16; j += nf) {
      const auto q0 = hn::ConvertTo(
          di, hn::Min(hn::Max(hn::MulAdd(hn::LoadU(df, x + j), vid, half), zero), fifteen));
      const auto q1 = hn::ConvertTo(
          di, hn::Min(hn::Max(hn::MulAdd(hn::LoadU(df, x + 16 + j), vid, half), zero), fifteen));
      hn::StoreU(hn::DemoteTo(d8, hn::Or(q0, hn::ShiftLeft<4>(q1))), d8, b[i].qs + j);
    }
  }
}

HWY_INLINE void RowToF16(const float* x, int64_t n, uint8_t* dst) {
  int64_t i = 0;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // F16C rounds to nearest even like quant's converter; Highway's emulation elsewhere does not.
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  hwy::float16_t* out = reinterpret_cast<hwy::float16_t*>(dst);
  for (; i + nf <= n; i += nf) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh, out + i);
#endif
  uint16_t* o16 = reinterpret_cast<uint16_t*>(dst);
  for (; i < n; ++i) o16[i] = fp32_to_fp16(x[i]);
}

HWY_INLINE void RowToBF16(const float* x, int64_t n, uint8_t* dst) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + nf <= n; i += nf) {
    const auto v = hn::LoadU(df, x + i);
    const auto bits = hn::BitCast(du, v);
    // Round to nearest even: add 0x7FFF plus the lowest kept bit, keep the top 16 bits.
    const auto rounded = hn::ShiftRight<16>(hn::Add(
        bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)))));
    const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
    const auto r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, out + i);
  }
  for (; i < n; ++i) out[i] = fp32_to_bf16(x[i]);
}
#endif  // HWY_TARGET != HWY_SCALAR

void ToCacheRows(GgmlType type, const float* src, int64_t src_stride, int64_t n_rows, int64_t n,
                 uint8_t* dst, size_t dst_stride, ThreadPool* pool) {
  constexpr int64_t kRowsPerTask = 8;
  internal::parallel_for(pool, internal::ceil_div(n_rows, kRowsPerTask), [&](int64_t task, int) {
    const int64_t r1 = std::min(n_rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < r1; ++r) {
      const float* x = src + r * src_stride;
      uint8_t* out = dst + r * dst_stride;
      switch (type) {
        case GgmlType::F32:
          std::memcpy(out, x, n * sizeof(float));
          continue;
#if HWY_TARGET != HWY_SCALAR
        case GgmlType::F16:
          RowToF16(x, n, out);
          continue;
        case GgmlType::BF16:
          RowToBF16(x, n, out);
          continue;
        case GgmlType::Q8_0:
          RowToQ8_0(x, n, out);
          continue;
        case GgmlType::Q4_0:
          RowToQ4_0(x, n, out);
          continue;
#endif
        default: {
          const Status st = quantize_row(type, x, out, n);
          CHECK(st.ok()) << "quantize_rows: " << st.to_string();
        }
      }
    }
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MNEMO_KERNELS_OPS_INL_H_
