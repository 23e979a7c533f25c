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

  // The loader requires the q/k norms of gemma3 and binds no biases for it.
  norm_rows(x_.data(), L.attn_norm, h_.data());
  attention_sublayer(il, kv, ub, h_.data(), h_.data());
  norm_rows(h_.data(), L.post_attn_norm, h_.data());
  add_residual();

  norm_rows(x_.data(), L.ffn_norm, h_.data());
  gated_ffn(il, FfnAct::kGelu, h_.data(), h_.data());
  norm_rows(h_.data(), L.post_ffn_norm, h_.data());
  add_residual();
}

}  // namespace mnemo
