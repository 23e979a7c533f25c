// The llama family block: llama (Llama 2/3, SmolLM), qwen2 (q/k/v biases), qwen3 (per-head
// RMSNorm of q and k before RoPE) and qwen3moe (qwen3 with a mixture of experts for the
// feed-forward). Pre-norm residual blocks:
//   x += Wo · attn(rope(norm_q(Wq·n(x) + bq)), rope(norm_k(Wk·n(x) + bk)), Wv·n(x) + bv)
//   x += Wdown · (silu(Wgate·n'(x)) * Wup·n'(x))        (qwen3moe: moe_ffn, src/model/blocks.cc)
// Sources: Touvron et al. 2023 (LLaMA); Qwen2 / Qwen3 technical reports; SwiGLU, Shazeer 2020.
#include "model/forward.h"

namespace mnemo {

void Forward::llama_layer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t n_embd = hp_.n_embd;
  const float eps = hp_.rms_eps;

  // Attention (biases: qwen2; q/k norms: qwen3).
  kernels::rms_norm(x_.data(), L.attn_norm.f32(), eps, T, n_embd, h_.data());
  attention_sublayer(il, kv, ub, h_.data(), h_.data());
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());

  // Feed-forward (SwiGLU).
  kernels::rms_norm(x_.data(), L.ffn_norm.f32(), eps, T, n_embd, h_.data());
  if (hp_.is_moe()) {
    moe_ffn(il, h_.data(), h_.data());
  } else {
    gated_ffn(il, FfnAct::kSilu, h_.data(), h_.data());
  }
  kernels::add(x_.data(), h_.data(), T * n_embd, x_.data());
}

}  // namespace mnemo
