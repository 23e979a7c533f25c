// The Gemma 3 block (Gemma Team 2025, "Gemma 3 Technical Report"): pre- and post-norms around
// both sub-blocks, per-head RMSNorm of q and k (QK-norm), RoPE with base 1e6 on global layers
// and 1e4 on the sliding-window (local) layers, GELU(tanh)-gated feed-forward:
//   x += post_attn_norm(Wo · attn(rope(qnorm(Wq·n(x))), rope(knorm(Wk·n(x))), Wv·n(x)))
//   x += post_ffw_norm(Wdown · (gelu(Wgate·n'(x)) * Wup·n'(x)))
// The embedding scale sqrt(n_embd) and the tied output are handled in Forward::run.
#include "model/forward.h"

namespace mnemo {

void Forward::gemma3_layer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t n_embd = hp_.n_embd;
  const int64_t hd = hp_.head_dim_k;
  const float eps = hp_.rms_eps;

  kernels::rms_norm(x_.data(), L.attn_norm.f32(), eps, T, n_embd, h_.data());
  matmul(L.wq, h_.data(), T, q_.data());
  matmul(L.wk, h_.data(), T, k_.data());
  matmul(L.wv, h_.data(), T, v_.data());
  kernels::rms_norm(q_.data(), L.attn_q_norm.f32(), eps, T * hp_.n_head, hd, q_.data());
  kernels::rms_norm(k_.data(), L.attn_k_norm.f32(), eps, T * hp_.n_head_kv, hd, k_.data());
  const kernels::RopeParams rp = rope_params(il);
  const float* table = rope_table_for(il, ub);
  kernels::rope_apply(rp, table, T, hp_.n_head, hd, q_.data(), int64_t(hp_.n_head) * hd);
  kernels::rope_apply(rp, table, T, hp_.n_head_kv, hd, k_.data(), int64_t(hp_.n_head_kv) * hd);
  attention(il, kv, ub, q_.data(), k_.data(), v_.data(), attn_.data());
  matmul(L.wo, attn_.data(), T, h_.data());
  kernels::rms_norm(h_.data(), L.post_attn_norm.f32(), eps, T, n_embd, h_.data());
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());

  kernels::rms_norm(x_.data(), L.ffn_norm.f32(), eps, T, n_embd, h_.data());
  matmul(L.ffn_gate, h_.data(), T, gate_.data());
  matmul(L.ffn_up, h_.data(), T, up_.data());
  kernels::gelu_mul(gate_.data(), up_.data(), T * hp_.n_ff, gate_.data());
  matmul(L.ffn_down, gate_.data(), T, h_.data());
  kernels::rms_norm(h_.data(), L.post_ffn_norm.f32(), eps, T, n_embd, h_.data());
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());
}

}  // namespace mnemo
