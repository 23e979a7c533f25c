// The mixers of qwen35 / qwen35moe (Qwen3.5), as llama.cpp's qwen35 graphs compute them. Pre-norm
// residual blocks (Forward::hybrid_layer, src/model/hybrid.cc) whose mixer is Gated
// DeltaNet (three layers in four) or gated attention:
//
//   x += mixer(rms_norm(x) * w_attn_norm)
//   x += ffn(rms_norm(x) * w_post_attention_norm)      SwiGLU (qwen35) or moe_ffn (qwen35moe)
//
// Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with
// Delta Rule"), Hk key heads, Hv value heads, head dim d:
//   q | k | v = silu(conv1d(W_qkv · h; conv state))     causal depthwise, no bias
//   q, k      = l2_norm(q), l2_norm(k) per head (eps = rms_eps, as llama.cpp)
//   beta      = sigmoid(W_beta · h);  g = softplus(W_alpha · h + dt_bias) * A   (A = ssm_a < 0)
//   o         = gated_delta_rule(q / sqrt(d), k, v, g, beta; state)       (ssm_kernels.h)
//   out       = W_out · (rms_norm(o) * w_ssm_norm * silu(W_gate · h))     norm per value head
// Gated attention (Qwen3-Next / Qwen3.5): W_q gives per head a query and a gate;
//   out = W_o · (attn(rope(norm_q(q)), rope(norm_k(W_k h)), W_v h) * sigmoid(gate))
// RoPE is NeoX-style over rope_dim of the head dims (Model::load_hparams).
//
// State layouts (per layer and sequence, floats, in the recurrent memory): conv
// [(2 Hk d + Hv d) channels x (d_conv - 1)], oldest input first; delta rule [Hv x d x d].
#include <algorithm>
#include <cmath>

#include "kernels/ssm_kernels.h"
#include "memory/recurrent_memory.h"
#include "model/forward.h"

namespace mnemo {

void Forward::delta_net_mixer(uint32_t il, const RecurrentMemoryContext& rs, const float* in,
                              float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t d = hp_.ssm_d_state, Hk = hp_.ssm_n_group, Hv = hp_.ssm_n_head;
  const int64_t n_qkv = 2 * Hk * d + Hv * d, n_v = Hv * d;
  // Scratch: qkv [T x n_qkv] | conv output [T x n_qkv] | z [T x n_v] | o [T x n_v] |
  // beta [T x Hv] | g [T x Hv].
  const size_t need = size_t(T) * size_t(2 * n_qkv + 2 * n_v + 2 * Hv);
  if (ssm_buf_.size() < need) ssm_buf_.resize(need);
  float* qkv = ssm_buf_.data();
  float* xc = qkv + T * n_qkv;
  float* z = xc + T * n_qkv;
  float* o = z + T * n_v;
  float* beta = o + T * n_v;
  float* g = beta + T * Hv;

  matmul(L.ssm_qkv, in, T, qkv);
  matmul(L.ssm_z, in, T, z);
  matmul(L.ssm_beta, in, T, beta);
  matmul(L.ssm_alpha, in, T, g);  // `in` is not read after this: out may alias it

  kernels::SsmConvParams cp;
  cp.n_tokens = T;
  cp.n_ch = n_qkv;
  cp.d_conv = hp_.ssm_d_conv;
  cp.silu = true;
  rs.for_segments(il, RsPart::kConv, T, [&](int64_t b, int64_t e) {
    cp.n_tokens = e - b;
    kernels::ssm_conv1d(cp, rs.conv_state(il), qkv + b * n_qkv, n_qkv, L.ssm_conv1d.f32(), nullptr,
                        xc + b * n_qkv, n_qkv, pool_);
  });
  for (int64_t t = 0; t < T; ++t) {
    kernels::l2_norm_rows(xc + t * n_qkv, 2 * Hk, d, d, hp_.rms_eps);  // the q and k heads
  }

  const float* dt_bias = L.ssm_dt_b.f32();
  const float* A = L.ssm_a.f32();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hv; ++h) {
      float& b = beta[t * Hv + h];
      b = 1.0f / (1.0f + std::exp(-b));
      const float a = g[t * Hv + h] + dt_bias[h];
      const float sp = a > 20.0f ? a : std::log1p(std::exp(a));
      g[t * Hv + h] = sp * A[h];
    }
  }

  kernels::DeltaNetParams p;
  p.n_tokens = T;
  p.n_k_head = Hk;
  p.n_v_head = Hv;
  p.head_dim = d;
  p.q_scale = 1.0f / std::sqrt(float(d));
  rs.for_segments(il, RsPart::kSsm, T, [&](int64_t b, int64_t e) {
    p.n_tokens = e - b;
    const float* xb = xc + b * n_qkv;
    kernels::gated_delta_net(p, rs.ssm_state(il), xb, xb + Hk * d, n_qkv, xb + 2 * Hk * d, n_qkv,
                             g + b * Hv, beta + b * Hv, Hv, o + b * n_v, n_v, pool_);
  });

  kernels::rms_norm(o, L.ssm_norm.f32(), hp_.rms_eps, T * Hv, d, o);
  kernels::silu_mul(z, o, T * n_v, o);
  matmul(L.ssm_out, o, T, out);
}

void Forward::gated_attention(uint32_t il, const KvCacheContext& kv, const Ubatch& ub,
                              const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t H = hp_.n_head, hd = hp_.head_dim_k, n_q = H * hd;
  const float eps = hp_.rms_eps;
  // Scratch: the joint projection [T x 2 n_q] (per head: query, then gate) | gate [T x n_q].
  const size_t need = size_t(T) * size_t(3 * n_q);
  if (ssm_buf_.size() < need) ssm_buf_.resize(need);
  float* qg = ssm_buf_.data();
  float* gate = qg + T * 2 * n_q;
  matmul(L.wq, in, T, qg);
  matmul(L.wk, in, T, k_.data());
  matmul(L.wv, in, T, v_.data());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* src = qg + t * 2 * n_q + h * 2 * hd;
      std::copy_n(src, hd, q_.data() + t * n_q + h * hd);
      std::copy_n(src + hd, hd, gate + t * n_q + h * hd);
    }
  }
  kernels::rms_norm(q_.data(), L.attn_q_norm.f32(), eps, T * H, hd, q_.data());
  kernels::rms_norm(k_.data(), L.attn_k_norm.f32(), eps, T * hp_.n_head_kv, hd, k_.data());
  const kernels::RopeParams rp = rope_params(il);
  const float* table = rope_table_for(il, ub);
  kernels::rope_apply(rp, table, T, H, hd, q_.data(), n_q);
  kernels::rope_apply(rp, table, T, hp_.n_head_kv, hd, k_.data(), int64_t(hp_.n_head_kv) * hd);
  attention(il, kv, ub, q_.data(), k_.data(), v_.data(), attn_.data());
  for (int64_t i = 0; i < T * n_q; ++i) attn_[size_t(i)] *= 1.0f / (1.0f + std::exp(-gate[i]));
  matmul(L.wo, attn_.data(), T, out);
}

}  // namespace mnemo
