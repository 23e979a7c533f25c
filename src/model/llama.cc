// The llama family block: llama (Llama 2/3, SmolLM), qwen2 (q/k/v biases) and qwen3 (per-head
// RMSNorm of q and k before RoPE). Pre-norm residual blocks:
//   x += Wo · attn(rope(norm_q(Wq·n(x) + bq)), rope(norm_k(Wk·n(x) + bk)), Wv·n(x) + bv)
//   x += Wdown · (silu(Wgate·n'(x)) * Wup·n'(x))
// Sources: Touvron et al. 2023 (LLaMA); Qwen2 / Qwen3 technical reports; SwiGLU, Shazeer 2020.
#include "model/forward.h"

namespace mnemo {

void Forward::llama_layer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t n_embd = hp_.n_embd;
  const int64_t hd = hp_.head_dim_k;
  const float eps = hp_.rms_eps;

  // Attention.
  kernels::rms_norm(x_.data(), L.attn_norm.f32(), eps, T, n_embd, h_.data());
  matmul(L.wq, h_.data(), T, q_.data());
  matmul(L.wk, h_.data(), T, k_.data());
  matmul(L.wv, h_.data(), T, v_.data());
  add_bias(L.bq, q_.data(), T);
  add_bias(L.bk, k_.data(), T);
  add_bias(L.bv, v_.data(), T);
  if (L.attn_q_norm.present()) {
    kernels::rms_norm(q_.data(), L.attn_q_norm.f32(), eps, T * hp_.n_head, hd, q_.data());
    kernels::rms_norm(k_.data(), L.attn_k_norm.f32(), eps, T * hp_.n_head_kv, hd, k_.data());
  }
  const kernels::RopeParams rp = rope_params(il);
  const float* table = rope_table_for(il, ub);
  kernels::rope_apply(rp, table, T, hp_.n_head, hd, q_.data(), int64_t(hp_.n_head) * hd);
  kernels::rope_apply(rp, table, T, hp_.n_head_kv, hd, k_.data(), int64_t(hp_.n_head_kv) * hd);
  attention(il, kv, ub, q_.data(), k_.data(), v_.data(), attn_.data());
  matmul(L.wo, attn_.data(), T, h_.data());
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());

  // Feed-forward (SwiGLU).
  kernels::rms_norm(x_.data(), L.ffn_norm.f32(), eps, T, n_embd, h_.data());
  matmul(L.ffn_gate, h_.data(), T, gate_.data());
  matmul(L.ffn_up, h_.data(), T, up_.data());
  kernels::silu_mul(gate_.data(), up_.data(), T * hp_.n_ff, gate_.data());
  matmul(L.ffn_down, gate_.data(), T, h_.data());
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());
}

}  // namespace mnemo
