// Sub-blocks shared by the attention architectures (llama.cc, gemma3.cc, granite_hybrid.cc): the
// attention sub-layer (projections, optional biases and QK-norm, RoPE, cache store, attention,
// output projection) and the gated feed-forward. What differs per architecture (pre / post norms,
// residual scaling, the gate activation) stays in the architecture's file.
#include "model/forward.h"

namespace mnemo {

void Forward::attention_sublayer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub,
                                 const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t hd = hp_.head_dim_k;
  const float eps = hp_.rms_eps;
  matmul(L.wq, in, T, q_.data());
  matmul(L.wk, in, T, k_.data());
  matmul(L.wv, in, T, v_.data());
  add_bias(L.bq, q_.data(), T);
  add_bias(L.bk, k_.data(), T);
  add_bias(L.bv, v_.data(), T);
  if (L.attn_q_norm.present()) {
    kernels::rms_norm(q_.data(), L.attn_q_norm.f32(), eps, T * hp_.n_head, hd, q_.data());
    kernels::rms_norm(k_.data(), L.attn_k_norm.f32(), eps, T * hp_.n_head_kv, hd, k_.data());
  }
  if (hp_.rope_dim > 0) {
    const kernels::RopeParams rp = rope_params(il);
    const float* table = rope_table_for(il, ub);
    kernels::rope_apply(rp, table, T, hp_.n_head, hd, q_.data(), int64_t(hp_.n_head) * hd);
    kernels::rope_apply(rp, table, T, hp_.n_head_kv, hd, k_.data(), int64_t(hp_.n_head_kv) * hd);
  }
  attention(il, kv, ub, q_.data(), k_.data(), v_.data(), attn_.data());
  matmul(L.wo, attn_.data(), T, out);
  add_bias(L.bo, out, T);
}

void Forward::gated_ffn(uint32_t il, FfnAct act, const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  matmul(L.ffn_gate, in, T, gate_.data());
  matmul(L.ffn_up, in, T, up_.data());
  if (act == FfnAct::kSilu) {
    kernels::silu_mul(gate_.data(), up_.data(), T * hp_.n_ff, gate_.data());
  } else {
    kernels::gelu_mul(gate_.data(), up_.data(), T * hp_.n_ff, gate_.data());
  }
  matmul(L.ffn_down, gate_.data(), T, out);
}

}  // namespace mnemo
