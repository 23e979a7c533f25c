// State-space kernels (mnemo/ssm_kernels.h) with Highway, compiled once per SIMD target and
// dispatched at run time: the causal conv runs a block of channels per vector (the taps and the
// carried inputs of each lane are one channel's), the selective scan one head's state rows with
// the state index across the lanes. Threads split channel blocks / heads. The gated RMSNorm
// (small, once per token) stays scalar.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ssm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float SiluScalar(float v) { return v / (1.0f + std::exp(-v)); }

// Channels [c0, c1) of ssm_conv1d (arguments as there). Full vectors of channels use the vector
// path, the rest the scalar one; each computes acc = b, then acc += w[k] u[t + k] for k in order.
void ConvChannels(int64_t T, int64_t K, bool silu, int64_t c0, int64_t c1, float* conv_state,
                  const float* x, int64_t x_stride, const float* w, const float* b, float* y,
                  int64_t y_stride) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  constexpr int64_t kMaxK = 8;  // taps held in registers; wider kernels take the scalar path
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = c0;
  if (K <= kMaxK) {
    HWY_ALIGN float lane[hn::MaxLanes(df)];
    for (; c + L <= c1; c += L) {
      V wk[kMaxK], win[kMaxK];
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t l = 0; l < L; ++l) lane[l] = w[(c + l) * K + k];
        wk[k] = hn::Load(df, lane);
      }
      for (int64_t k = 0; k + 1 < K; ++k) {
        for (int64_t l = 0; l < L; ++l) lane[l] = conv_state[(c + l) * (K - 1) + k];
        win[k] = hn::Load(df, lane);
      }
      const V bias = b != nullptr ? hn::LoadU(df, b + c) : hn::Zero(df);
      for (int64_t t = 0; t < T; ++t) {
        win[K - 1] = hn::LoadU(df, x + t * x_stride + c);
        V acc = bias;
        for (int64_t k = 0; k < K; ++k) acc = hn::MulAdd(wk[k], win[k], acc);
        if (silu) {
          // v / (1 + exp(-v)), exp only of -|v| (no overflow): sigmoid = e / (1 + e) for v < 0.
          const V e = hn::Exp(df, hn::Neg(hn::Abs(acc)));
          const V inv = hn::Div(hn::Set(df, 1.0f), hn::Add(hn::Set(df, 1.0f), e));
          const V sig = hn::IfThenElse(hn::Ge(acc, hn::Zero(df)), inv, hn::Mul(e, inv));
          acc = hn::Mul(acc, sig);
        }
        hn::StoreU(acc, df, y + t * y_stride + c);
        for (int64_t k = 0; k + 1 < K; ++k) win[k] = win[k + 1];
      }
      for (int64_t k = 0; k + 1 < K; ++k) {
        hn::Store(win[k], df, lane);
        for (int64_t l = 0; l < L; ++l) conv_state[(c + l) * (K - 1) + k] = lane[l];
      }
    }
  }
  for (; c < c1; ++c) {  // the scalar path: the same formula
    float u[kMaxK + 64];
    float* st = conv_state + c * (K - 1);
    const float* wc = w + c * K;
    const float bias = b != nullptr ? b[c] : 0.0f;
    std::copy(st, st + (K - 1), u);
    for (int64_t t = 0; t < T; ++t) {
      u[K - 1] = x[t * x_stride + c];
      float acc = bias;
      for (int64_t k = 0; k < K; ++k) acc += wc[k] * u[k];
      y[t * y_stride + c] = silu ? SiluScalar(acc) : acc;
      std::copy(u + 1, u + K, u);
    }
    std::copy(u, u + (K - 1), st);
  }
}

// One head of ssm_scan over T tokens: sh [P x N] its state, the other pointers already offset to
// the head (x, y: its P channels; B, C: its group's N values; dt: its column).
void ScanHead(int64_t T, int64_t P, int64_t N, float* sh, const float* x, int64_t x_stride,
              const float* dt, int64_t dt_stride, float dt_bias, float A, const float* B,
              int64_t b_stride, const float* C, int64_t c_stride, const float* D, float* y,
              int64_t y_stride) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t t = 0; t < T; ++t) {
    const float v = dt[t * dt_stride] + dt_bias;
    const float dts = v > 20.0f ? v : std::log1p(std::exp(v));
    const float decay = std::exp(dts * A);
    const float* Bt = B + t * b_stride;
    const float* Ct = C + t * c_stride;
    const float* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    const V vdecay = hn::Set(df, decay);
    for (int64_t i = 0; i < P; ++i) {
      const float xdt = xt[i] * dts;
      const V vxdt = hn::Set(df, xdt);
      float* s = sh + i * N;
      V acc = hn::Zero(df);
      int64_t n = 0;
      for (; n + L <= N; n += L) {
        const V sn = hn::MulAdd(hn::LoadU(df, Bt + n), vxdt, hn::Mul(hn::LoadU(df, s + n), vdecay));
        hn::StoreU(sn, df, s + n);
        acc = hn::MulAdd(sn, hn::LoadU(df, Ct + n), acc);
      }
      float sum = hn::GetLane(hn::SumOfLanes(df, acc));
      for (; n < N; ++n) {
        s[n] = s[n] * decay + Bt[n] * xdt;
        sum += s[n] * Ct[n];
      }
      yt[i] = sum + (D != nullptr ? *D * xt[i] : 0.0f);
    }
  }
}

}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "kernels/ssm_kernels.h"
#include "mnemo/check.h"
#include "mnemo/thread_pool.h"

namespace mnemo::kernels {

HWY_EXPORT(ConvChannels);
HWY_EXPORT(ScanHead);

namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

template <class F>
void run(ThreadPool* pool, int64_t n_tasks, F&& fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
  } else {
    pool->parallel_for(n_tasks, [&](int64_t i, int) { fn(i); });
  }
}

// Channels per conv task: enough work per task to amortize the hand-out (a multiple of every
// target's lane count, so a channel's path does not depend on the thread split).
constexpr int64_t kConvBlock = 256;

}  // namespace

void ssm_conv1d(const SsmConvParams& p, float* conv_state, const float* x, int64_t x_stride,
                const float* w, const float* b, float* y, int64_t y_stride, ThreadPool* pool) {
  const int64_t T = p.n_tokens, n_ch = p.n_ch, K = p.d_conv;
  CHECK(T >= 1 && n_ch >= 1 && K >= 1 && K <= 64 && x_stride >= n_ch && y_stride >= n_ch)
      << "ssm_conv1d: T " << T << " n_ch " << n_ch << " d_conv " << K;
  const int64_t n_tasks = (n_ch + kConvBlock - 1) / kConvBlock;
  run(pool, n_tasks, [&](int64_t task) {
    const int64_t c0 = task * kConvBlock;
    const int64_t c1 = std::min(n_ch, c0 + kConvBlock);
    HWY_DYNAMIC_DISPATCH(ConvChannels)
    (T, K, p.silu, c0, c1, conv_state, x, x_stride, w, b, y, y_stride);
  });
}

void ssm_scan(const SsmScanParams& p, float* state, const float* x, int64_t x_stride,
              const float* dt, int64_t dt_stride, const float* dt_bias, const float* A,
              const float* B, int64_t b_stride, const float* C, int64_t c_stride, const float* D,
              float* y, int64_t y_stride, ThreadPool* pool) {
  const int64_t T = p.n_tokens, H = p.n_head, P = p.head_dim, N = p.d_state, G = p.n_group;
  CHECK(T >= 1 && H >= 1 && P >= 1 && N >= 1 && G >= 1 && H % G == 0)
      << "ssm_scan: T " << T << " n_head " << H << " head_dim " << P << " d_state " << N
      << " n_group " << G;
  CHECK(x_stride >= H * P && y_stride >= H * P && dt_stride >= H && b_stride >= G * N &&
        c_stride >= G * N);
  const int64_t heads_per_group = H / G;
  run(pool, H, [&](int64_t h) {
    const int64_t g = h / heads_per_group;
    HWY_DYNAMIC_DISPATCH(ScanHead)
    (T, P, N, state + h * P * N, x + h * P, x_stride, dt + h, dt_stride,
     dt_bias != nullptr ? dt_bias[h] : 0.0f, A[h], B + g * N, b_stride, C + g * N, c_stride,
     D != nullptr ? D + h : nullptr, y + h * P, y_stride);
  });
}

void rms_norm_gated(const float* y, int64_t y_stride, const float* z, int64_t z_stride,
                    const float* w, float eps, int64_t n_tokens, int64_t n, int64_t n_group,
                    float* out, int64_t out_stride) {
  CHECK(n_tokens >= 0 && n >= 1 && n_group >= 1 && n % n_group == 0)
      << "rms_norm_gated: n " << n << " n_group " << n_group;
  const int64_t gs = n / n_group;
  std::vector<float> v(static_cast<size_t>(gs));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t g = 0; g < n_group; ++g) {
      const int64_t j0 = g * gs;
      double ss = 0.0;
      for (int64_t j = 0; j < gs; ++j) {
        v[j] = y[t * y_stride + j0 + j] * silu(z[t * z_stride + j0 + j]);
        ss += double(v[j]) * v[j];
      }
      const float scale = float(1.0 / std::sqrt(ss / double(gs) + double(eps)));
      for (int64_t j = 0; j < gs; ++j) out[t * out_stride + j0 + j] = v[j] * scale * w[j0 + j];
    }
  }
}

}  // namespace mnemo::kernels
#endif  // HWY_ONCE
