// The block of the hybrids: granitehybrid (IBM Granite 4.0-H; Bamba), as llama.cpp's
// granite-hybrid graph computes it, and qwen35 / qwen35moe, whose mixers (Gated DeltaNet, gated
// attention) and mixture of experts src/model/qwen35.cc and blocks.cc describe; Qwen3.5 has no
// multipliers (all 1) and its post_attention_norm is the feed-forward's norm. Every block is
// pre-norm; its mixer is either a Mamba-2 mixer (src/model/mamba2.cc) or grouped-query attention,
// chosen per layer by head_count_kv (0: Mamba-2); every block ends with a SwiGLU feed-forward.
// Granite's multipliers scale the embeddings, both residual branches, the attention scores and the
// logits:
//
//   x  = embd_scale * token_embd[tok]
//   x += residual_scale * mixer(rms_norm(x) * w_attn_norm)
//   x += residual_scale * W_down · (silu(W_gate · n'(x)) * W_up · n'(x))
//   logits = W_out · rms_norm(x) / logit_scale
//
// Attention: scores scaled by attention.scale (1/sqrt(head_dim) when absent); Granite 4.0-H uses
// no positional encoding at all (rope_dim 0), Bamba RoPE "norm" (adjacent pairs). The model
// needs a HybridMemory: a KvCache for the attention layers, a RecurrentMemory for the others.
// Sources: IBM Granite 4.0 model cards; Dao & Gu 2024 (Mamba-2); Shazeer 2020 (SwiGLU).
#include "memory/recurrent_memory.h"
#include "model/forward.h"

namespace mnemo {

void Forward::hybrid_layer(uint32_t il, const MemoryContext& mctx, const Ubatch& ub) {
  const LayerWeights& L = model_.layers()[il];
  const bool qwen35 = hp_.arch == Arch::kQwen35 || hp_.arch == Arch::kQwen35Moe;

  norm_rows(x_.data(), L.attn_norm, h_.data());
  if (hp_.is_recurrent_layer(il)) {
    const RecurrentMemoryContext* rs = mctx.rs_for_layer(il);
    CHECK(rs != nullptr) << "no recurrent state for layer " << il;
    if (qwen35) {
      delta_net_mixer(il, *rs, h_.data(), h_.data());
    } else {
      mamba2_mixer(il, *rs, h_.data(), h_.data());
    }
  } else {
    const KvCacheContext* kv = mctx.kv_for_layer(il);
    CHECK(kv != nullptr) << "no KV context for layer " << il;
    if (qwen35) {
      gated_attention(il, *kv, ub, h_.data(), h_.data());
    } else {
      attention_sublayer(il, *kv, ub, h_.data(), h_.data());
    }
  }
  add_residual(hp_.residual_scale);

  norm_rows(x_.data(), L.ffn_norm, h_.data());
  if (hp_.is_moe()) {
    moe_ffn(il, h_.data(), h_.data());
  } else {
    gated_ffn(il, FfnAct::kSilu, h_.data(), h_.data());
  }
  add_residual(hp_.residual_scale);
}

}  // namespace mnemo
