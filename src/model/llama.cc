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

  // Attention (biases: qwen2; q/k norms: qwen3).
  norm_rows(x_.data(), L.attn_norm, h_.data());
  attention_sublayer(il, kv, ub, h_.data(), h_.data());
  add_residual();

  // Feed-forward (SwiGLU).
  norm_rows(x_.data(), L.ffn_norm, h_.data());
  if (hp_.is_moe()) {
    moe_ffn(il, h_.data(), h_.data());
  } else {
    gated_ffn(il, FfnAct::kSilu, h_.data(), h_.data());
  }
  add_residual();
}

}  // namespace mnemo
