#include "kernels/ssm_reference.h"

#include <cmath>
#include <vector>

namespace mnemo::kernels::ref {
namespace {

double softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }
double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

void ssm_conv1d(const SsmConvParams& p, float* conv_state, const float* x, int64_t x_stride,
                const float* w, const float* b, float* y, int64_t y_stride) {
  const int64_t K = p.d_conv;
  for (int64_t c = 0; c < p.n_ch; ++c) {
    // The channel's inputs in time order: the state's d_conv - 1, then the tokens.
    std::vector<double> u;
    for (int64_t k = 0; k < K - 1; ++k) u.push_back(conv_state[c * (K - 1) + k]);
    for (int64_t t = 0; t < p.n_tokens; ++t) u.push_back(x[t * x_stride + c]);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      double acc = b != nullptr ? b[c] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(w[c * K + k]) * u[t + k];
      y[t * y_stride + c] = static_cast<float>(p.silu ? silu(acc) : acc);
    }
    for (int64_t k = 0; k < K - 1; ++k) {
      conv_state[c * (K - 1) + k] = static_cast<float>(u[u.size() - (K - 1) + k]);
    }
  }
}

void ssm_scan(const SsmScanParams& p, float* state, const float* x, int64_t x_stride,
              const float* dt, int64_t dt_stride, const float* dt_bias, const float* A,
              const float* B, int64_t b_stride, const float* C, int64_t c_stride, const float* D,
              float* y, int64_t y_stride) {
  const int64_t H = p.n_head, P = p.head_dim, N = p.d_state, G = p.n_group;
  std::vector<double> h(state, state + H * P * N);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t g = hd / (H / G);
      const double d = softplus(double(dt[t * dt_stride + hd]) + (dt_bias ? dt_bias[hd] : 0.0));
      const double decay = std::exp(d * A[hd]);
      for (int64_t i = 0; i < P; ++i) {
        const double xi = x[t * x_stride + hd * P + i];
        double acc = 0.0;
        for (int64_t s = 0; s < N; ++s) {
          double& hs = h[(hd * P + i) * N + s];
          hs = hs * decay + d * xi * B[t * b_stride + g * N + s];
          acc += hs * C[t * c_stride + g * N + s];
        }
        if (D != nullptr) acc += D[hd] * xi;
        y[t * y_stride + hd * P + i] = static_cast<float>(acc);
      }
    }
  }
  for (size_t k = 0; k < h.size(); ++k) state[k] = static_cast<float>(h[k]);
}

void rms_norm_gated(const float* y, int64_t y_stride, const float* z, int64_t z_stride,
                    const float* w, float eps, int64_t n_tokens, int64_t n, int64_t n_group,
                    float* out, int64_t out_stride) {
  const int64_t gs = n / n_group;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<double> v(n);
    for (int64_t j = 0; j < n; ++j) v[j] = y[t * y_stride + j] * silu(z[t * z_stride + j]);
    for (int64_t g = 0; g < n_group; ++g) {
      double ss = 0.0;
      for (int64_t j = g * gs; j < (g + 1) * gs; ++j) ss += v[j] * v[j];
      const double r = 1.0 / std::sqrt(ss / gs + eps);
      for (int64_t j = g * gs; j < (g + 1) * gs; ++j) {
        out[t * out_stride + j] = static_cast<float>(v[j] * r * w[j]);
      }
    }
  }
}

void gated_delta_net(const DeltaNetParams& p, float* state, const float* q, const float* k,
                     int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                     const float* beta, int64_t gb_stride, float* out, int64_t out_stride) {
  const int64_t T = p.n_tokens, Hk = p.n_k_head, Hv = p.n_v_head, d = p.head_dim;
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h % Hk;
    std::vector<double> S(state + h * d * d, state + (h + 1) * d * d);
    for (int64_t t = 0; t < T; ++t) {
      const float* kt = k + t * qk_stride + kh * d;
      const float* qt = q + t * qk_stride + kh * d;
      const float* vt = v + t * v_stride + h * d;
      const double decay = std::exp(double(g[t * gb_stride + h]));
      const double b = beta[t * gb_stride + h];
      for (int64_t i = 0; i < d; ++i) {
        double* si = &S[size_t(i * d)];
        double u = 0.0;
        for (int64_t j = 0; j < d; ++j) u += (si[j] *= decay) * kt[j];
        const double delta = b * (double(vt[i]) - u);
        double o = 0.0;
        for (int64_t j = 0; j < d; ++j) o += (si[j] += delta * kt[j]) * qt[j];
        out[t * out_stride + h * d + i] = float(o * p.q_scale);
      }
    }
    for (int64_t e = 0; e < d * d; ++e) state[h * d * d + e] = float(S[size_t(e)]);
  }
}

void l2_norm_rows(float* x, int64_t n_rows, int64_t n, int64_t stride, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[r * stride + i]) * x[r * stride + i];
    const double inv = 1.0 / std::max(std::sqrt(ss), double(eps));
    for (int64_t i = 0; i < n; ++i) x[r * stride + i] = float(x[r * stride + i] * inv);
  }
}

}  // namespace mnemo::kernels::ref
