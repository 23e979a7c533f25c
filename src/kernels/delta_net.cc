// The gated delta rule and the L2 row norm (mnemo/ssm_kernels.h) with Highway, compiled once per
// SIMD target and dispatched at run time. Per value head the state is d rows of d floats; one
// token's update runs row by row: the decay and the dot product with k in one pass, the rank-1
// update and the dot product with q in a second, each over contiguous memory.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_net.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One value head over T tokens. Arguments as gated_delta_net, already offset to the head:
// s [d x d], q/k rows of the head's key head, v/out rows of the value head, g/beta its column.
void DeltaNetHead(int64_t T, int64_t d, float q_scale, float* s, const float* q, const float* k,
                  int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                  const float* beta, int64_t gb_stride, float* out, int64_t out_stride) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t t = 0; t < T; ++t) {
    const float* kt = k + t * qk_stride;
    const float* qt = q + t * qk_stride;
    const float* vt = v + t * v_stride;
    float* ot = out + t * out_stride;
    const float decay = std::exp(g[t * gb_stride]);
    const float b = beta[t * gb_stride];
    const V vdecay = hn::Set(df, decay);
    for (int64_t i = 0; i < d; ++i) {
      float* si = s + i * d;
      // Pass 1: S[i] *= decay; u = S[i] . k.
      V acc0 = hn::Zero(df), acc1 = hn::Zero(df);
      int64_t j = 0;
      for (; j + 2 * nf <= d; j += 2 * nf) {
        const V s0 = hn::Mul(hn::LoadU(df, si + j), vdecay);
        const V s1 = hn::Mul(hn::LoadU(df, si + j + nf), vdecay);
        hn::StoreU(s0, df, si + j);
        hn::StoreU(s1, df, si + j + nf);
        acc0 = hn::MulAdd(s0, hn::LoadU(df, kt + j), acc0);
        acc1 = hn::MulAdd(s1, hn::LoadU(df, kt + j + nf), acc1);
      }
      float u = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
      for (; j < d; ++j) {
        si[j] *= decay;
        u += si[j] * kt[j];
      }
      // Pass 2: S[i] += delta k; o[i] = S[i] . q * q_scale.
      const float delta = b * (vt[i] - u);
      const V vdelta = hn::Set(df, delta);
      acc0 = hn::Zero(df);
      acc1 = hn::Zero(df);
      j = 0;
      for (; j + 2 * nf <= d; j += 2 * nf) {
        const V s0 = hn::MulAdd(hn::LoadU(df, kt + j), vdelta, hn::LoadU(df, si + j));
        const V s1 = hn::MulAdd(hn::LoadU(df, kt + j + nf), vdelta, hn::LoadU(df, si + j + nf));
        hn::StoreU(s0, df, si + j);
        hn::StoreU(s1, df, si + j + nf);
        acc0 = hn::MulAdd(s0, hn::LoadU(df, qt + j), acc0);
        acc1 = hn::MulAdd(s1, hn::LoadU(df, qt + j + nf), acc1);
      }
      float o = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
      for (; j < d; ++j) {
        si[j] += delta * kt[j];
        o += si[j] * qt[j];
      }
      ot[i] = o * q_scale;
    }
  }
}

void L2NormRows(float* x, int64_t n_rows, int64_t n, int64_t stride, float eps) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* xr = x + r * stride;
    V acc = hn::Zero(df);
    int64_t i = 0;
    for (; i + nf <= n; i += nf) {
      const V a = hn::LoadU(df, xr + i);
      acc = hn::MulAdd(a, a, acc);
    }
    float ss = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::max(std::sqrt(ss), eps);
    const V vinv = hn::Set(df, inv);
    i = 0;
    for (; i + nf <= n; i += nf) hn::StoreU(hn::Mul(hn::LoadU(df, xr + i), vinv), df, xr + i);
    for (; i < n; ++i) xr[i] *= inv;
  }
}

}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/ssm_kernels.h"
#include "mnemo/check.h"
#include "mnemo/thread_pool.h"

namespace mnemo::kernels {

HWY_EXPORT(DeltaNetHead);
HWY_EXPORT(L2NormRows);

void gated_delta_net(const DeltaNetParams& p, float* state, const float* q, const float* k,
                     int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                     const float* beta, int64_t gb_stride, float* out, int64_t out_stride,
                     ThreadPool* pool) {
  const int64_t T = p.n_tokens, Hk = p.n_k_head, Hv = p.n_v_head, d = p.head_dim;
  CHECK(T >= 1 && Hk >= 1 && Hv >= 1 && d >= 1 && Hv % Hk == 0)
      << "gated_delta_net: T " << T << " Hk " << Hk << " Hv " << Hv << " d " << d;
  CHECK(qk_stride >= Hk * d && v_stride >= Hv * d && gb_stride >= Hv && out_stride >= Hv * d);
  auto head = [&](int64_t h) {
    const int64_t kh = h % Hk;
    HWY_DYNAMIC_DISPATCH(DeltaNetHead)
    (T, d, p.q_scale, state + h * d * d, q + kh * d, k + kh * d, qk_stride, v + h * d, v_stride,
     g + h, beta + h, gb_stride, out + h * d, out_stride);
  };
  if (pool == nullptr) {
    for (int64_t h = 0; h < Hv; ++h) head(h);
  } else {
    pool->parallel_for(Hv, [&](int64_t h, int) { head(h); });
  }
}

void l2_norm_rows(float* x, int64_t n_rows, int64_t n, int64_t stride, float eps) {
  CHECK(n_rows >= 0 && n >= 1 && stride >= n) << "l2_norm_rows: " << n_rows << " x " << n;
  HWY_DYNAMIC_DISPATCH(L2NormRows)(x, n_rows, n, stride, eps);
}

}  // namespace mnemo::kernels
#endif  // HWY_ONCE
