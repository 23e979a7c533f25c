// State-space kernels (mnemo/ssm_kernels.h): portable C++ loops arranged for the compiler's
// auto-vectorizer (the innermost loop runs over contiguous memory without a carried float
// reduction where possible) and split across threads by head / channel block.

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ssm_kernels.h"
#include "mnemo/check.h"
#include "mnemo/thread_pool.h"

namespace mnemo::kernels {
namespace {

inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

template <class F>
void run(ThreadPool* pool, int64_t n_tasks, F&& fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
  } else {
    pool->parallel_for(n_tasks, [&](int64_t i, int) { fn(i); });
  }
}

// Channels per conv task: enough work per task to amortize the hand-out.
constexpr int64_t kConvBlock = 256;

}  // namespace

void ssm_conv1d(const SsmConvParams& p, float* conv_state, const float* x, int64_t x_stride,
                const float* w, const float* b, float* y, int64_t y_stride, ThreadPool* pool) {
  const int64_t T = p.n_tokens, n_ch = p.n_ch, K = p.d_conv;
  CHECK(T >= 1 && n_ch >= 1 && K >= 1 && x_stride >= n_ch && y_stride >= n_ch)
      << "ssm_conv1d: T " << T << " n_ch " << n_ch << " d_conv " << K;
  const int64_t n_tasks = (n_ch + kConvBlock - 1) / kConvBlock;
  run(pool, n_tasks, [&](int64_t task) {
    const int64_t c0 = task * kConvBlock;
    const int64_t c1 = std::min(n_ch, c0 + kConvBlock);
    std::vector<float> u(size_t(K - 1 + T));  // one channel's inputs continued from its state
    for (int64_t c = c0; c < c1; ++c) {
      float* st = conv_state + c * (K - 1);
      std::copy(st, st + (K - 1), u.begin());
      for (int64_t t = 0; t < T; ++t) u[K - 1 + t] = x[t * x_stride + c];
      const float* wc = w + c * K;
      const float bias = b != nullptr ? b[c] : 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        float acc = bias;
        for (int64_t k = 0; k < K; ++k) acc += wc[k] * u[t + k];
        y[t * y_stride + c] = p.silu ? silu(acc) : acc;
      }
      std::copy(u.begin() + T, u.begin() + T + (K - 1), st);
    }
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
    float* sh = state + h * P * N;  // [P x N]
    for (int64_t t = 0; t < T; ++t) {
      const float dts = softplus(dt[t * dt_stride + h] + (dt_bias != nullptr ? dt_bias[h] : 0.0f));
      const float decay = std::exp(dts * A[h]);
      const float* Bt = B + t * b_stride + g * N;
      const float* Ct = C + t * c_stride + g * N;
      const float* xt = x + t * x_stride + h * P;
      float* yt = y + t * y_stride + h * P;
      for (int64_t i = 0; i < P; ++i) {
        const float xdt = xt[i] * dts;
        float* s = sh + i * N;
        // Update, then the dot product with C: two passes keep the update loop free of a carried
        // float reduction (vectorizable without reassociation).
        for (int64_t n = 0; n < N; ++n) s[n] = s[n] * decay + Bt[n] * xdt;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t n = 0;
        for (; n + 8 <= N; n += 8) {
          for (int k = 0; k < 8; ++k) acc[k] += s[n + k] * Ct[n + k];
        }
        float sum =
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; n < N; ++n) sum += s[n] * Ct[n];
        yt[i] = sum + (D != nullptr ? D[h] * xt[i] : 0.0f);
      }
    }
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
