// Scalar reference twins (see reference.h). Written for obviousness, not speed.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mnemo/check.h"
#include "mnemo/quant.h"

namespace mnemo::kernels::ref {
namespace {

std::vector<float> dequantize(GgmlType type, const void* row, int64_t n) {
  std::vector<float> out(n);
  const Status st = dequantize_row(type, row, out.data(), n);
  CHECK(st.ok()) << st.to_string();
  return out;
}

double gelu_tanh(double g) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)));
}

double silu_d(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

void quantize_dequantize_q8(const float* x, int64_t n, float* out) {
  CHECK(n % 32 == 0);
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float q = std::nearbyint(x[b + i] * inv);  // default mode: round half to even
      out[b + i] = d * q;
    }
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, bool quantize_x) {
  const size_t row_bytes = row_size(w.type, w.n_in);
  std::vector<float> xq(w.n_in);
  std::vector<std::vector<float>> rows(w.n_out);
  for (int64_t r = 0; r < w.n_out; ++r) {
    rows[r] = dequantize(w.type, static_cast<const uint8_t*>(w.data) + r * row_bytes, w.n_in);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * w.n_in;
    if (quantize_x) {
      quantize_dequantize_q8(xt, w.n_in, xq.data());
      xt = xq.data();
    }
    for (int64_t r = 0; r < w.n_out; ++r) {
      double acc = 0.0;
      for (int64_t i = 0; i < w.n_in; ++i) acc += static_cast<double>(rows[r][i]) * xt[i];
      y[t * w.n_out + r] = static_cast<float>(acc);
    }
  }
}

void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      y[r * n + i] = static_cast<float>(x[r * n + i] * inv * (weight ? weight[i] : 1.0f));
    }
  }
}

void softmax(float* x, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * n;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(row[i]));
    if (std::isinf(mx) && mx < 0) {
      std::fill(row, row + n, 0.0f);
      continue;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - mx);
    for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(std::exp(row[i] - mx) / sum);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(silu_d(gate[i]) * up[i]);
}
void gelu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(gelu_tanh(gate[i]) * up[i]);
}
void silu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(silu_d(x[i]));
}
void gelu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(gelu_tanh(x[i]));
}
void add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void mul(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(x[i] / cap));
}

void rope(const RopeParams& p, const int32_t* pos, int64_t n_tokens, int64_t n_head,
          int64_t head_dim, float* x) {
  const int64_t half = p.n_dims / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double theta =
            static_cast<double>(pos[t]) * p.freq_scale *
            std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_dims);
        const double c = std::cos(theta), s = std::sin(theta);
        const int64_t i0 = p.mode == RopeMode::kNormal ? 2 * i : i;
        const int64_t i1 = p.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
        const double a = v[i0], b = v[i1];
        v[i0] = static_cast<float>(a * c - b * s);
        v[i1] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

void attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, bool quantize_q) {
  const int64_t d = p.head_dim;
  const int64_t n_kv_elems = p.n_head_kv * d;
  const int64_t group = p.n_head / p.n_head_kv;
  std::vector<std::vector<float>> k(kv.n_kv), v(kv.n_kv);
  for (int64_t c = 0; c < kv.n_kv; ++c) {
    k[c] = dequantize(kv.k_type, static_cast<const uint8_t*>(kv.k) + c * kv.k_stride, n_kv_elems);
    if (kv.v_head_stride == 0) {
      v[c] = dequantize(kv.v_type, static_cast<const uint8_t*>(kv.v) + c * kv.v_stride, n_kv_elems);
    } else {
      for (int64_t g = 0; g < p.n_head_kv; ++g) {
        const std::vector<float> seg = dequantize(
            kv.v_type, static_cast<const uint8_t*>(kv.v) + g * kv.v_head_stride + c * kv.v_stride,
            d);
        v[c].insert(v[c].end(), seg.begin(), seg.end());
      }
    }
  }
  // Cells outside kv.order (when given) are seen by no row.
  std::vector<bool> listed(kv.n_kv, kv.order == nullptr);
  for (int64_t j = 0; kv.order != nullptr && j < kv.n_order; ++j) listed[kv.order[j]] = true;
  std::vector<float> qh(d);
  std::vector<double> s(kv.n_kv);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t g = h / group;
      const float* qv = q + (t * p.n_head + h) * d;
      if (quantize_q) {
        quantize_dequantize_q8(qv, d, qh.data());
      } else {
        std::copy(qv, qv + d, qh.begin());
      }
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < kv.n_kv; ++c) {
        const float m = mask ? mask[t * mask_stride + c] : 0.0f;
        if ((std::isinf(m) && m < 0) || !listed[c]) {
          s[c] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * k[c][g * d + i];
        double sc = p.scale * dot;
        if (p.softcap > 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
        s[c] = sc + m;
        mx = std::max(mx, s[c]);
      }
      float* o = out + (t * p.n_head + h) * d;
      std::fill(o, o + d, 0.0f);
      if (std::isinf(mx) && mx < 0) continue;
      double sum = 0.0;
      std::vector<double> acc(d, 0.0);
      for (int64_t c = 0; c < kv.n_kv; ++c) {
        if (std::isinf(s[c])) continue;
        const double e = std::exp(s[c] - mx);
        sum += e;
        for (int64_t i = 0; i < d; ++i) acc[i] += e * v[c][g * d + i];
      }
      for (int64_t i = 0; i < d; ++i) o[i] = static_cast<float>(acc[i] / sum);
    }
  }
}

}  // namespace mnemo::kernels::ref
