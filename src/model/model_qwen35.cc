// Loading of qwen35 and qwen35moe (Qwen3.5 / 3.6, Qwen3-Next's successors): hybrids of Gated
// DeltaNet layers (linear attention with a recurrent state) and gated full-attention layers;
// qwen35moe has a mixture of experts with a gated shared expert where qwen35 has a SwiGLU
// feed-forward. The attention hyper-parameters are read by Model::load_hparams like any llama
// family model; this file adds the Gated DeltaNet ones and binds the tensors.
//
// Metadata keys and tensor names are those llama.cpp's converter writes (gguf-py constants.py
// MODEL_ARCH.QWEN35 / QWEN35MOE; llama.cpp's qwen35 loader):
//   {arch}.full_attention_interval (default 4): layer il is full attention when
//     (il + 1) % interval == 0, Gated DeltaNet otherwise.
//   {arch}.ssm.conv_kernel (d_conv), .ssm.state_size (d, the head dim of keys and values),
//     .ssm.group_count (Hk key heads), .ssm.time_step_rank (Hv value heads), .ssm.inner_size
//     (Hv d); {arch}.rope.dimension_sections (interleaved multi-axis RoPE; for text all axes
//     hold the position, so only its total matters).
//   Gated DeltaNet layer: blk.N.attn_qkv.weight [n_embd, 2 Hk d + Hv d],
//     blk.N.attn_gate.weight [n_embd, Hv d], blk.N.ssm_conv1d.weight [d_conv, 2 Hk d + Hv d],
//     blk.N.ssm_dt.bias [Hv], blk.N.ssm_a [Hv] (-exp(A_log)), blk.N.ssm_beta.weight and
//     blk.N.ssm_alpha.weight [n_embd, Hv], blk.N.ssm_norm.weight [d], blk.N.ssm_out.weight
//     [Hv d, n_embd].
//   Attention layer: blk.N.attn_q.weight [n_embd, 2 n_head head_dim] (per head: q, then its
//     gate), attn_k / attn_v / attn_output, attn_q_norm / attn_k_norm [head_dim].
//   Every layer: attn_norm, post_attention_norm (the norm before the feed-forward) [n_embd];
//     qwen35: ffn_gate / ffn_up / ffn_down; qwen35moe: ffn_gate_inp [n_embd, E],
//     ffn_{gate,up}_exps [n_embd, F, E], ffn_down_exps [F, n_embd, E], and the shared expert
//     ffn_gate_inp_shexp [n_embd], ffn_{gate,up}_shexp [n_embd, Fs], ffn_down_shexp [Fs, n_embd].
#include <fmt/format.h>

#include "mnemo/model.h"
#include "model/load_util.h"

namespace mnemo {

using model_load::bind_tensor;
using model_load::read_u32_key;

Status Model::load_qwen35_hparams() {
  const gguf::File& f = file_;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.conv_kernel", &hp_.ssm_d_conv, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.inner_size", &hp_.ssm_d_inner, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.state_size", &hp_.ssm_d_state, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.time_step_rank", &hp_.ssm_n_head, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.group_count", &hp_.ssm_n_group, true));
  const uint32_t d = hp_.ssm_d_state, Hv = hp_.ssm_n_head, Hk = hp_.ssm_n_group;
  if (hp_.ssm_d_conv == 0 || hp_.ssm_d_conv > 64 || d == 0 || d > 1024 || Hv == 0 || Hk == 0 ||
      Hv > 1024 || Hv % Hk != 0 || uint64_t(Hv) * d != hp_.ssm_d_inner) {
    return Status::invalid_argument(fmt::format(
        "Gated DeltaNet hyper-parameters ssm.conv_kernel {} inner_size {} state_size {} "
        "time_step_rank {} group_count {}: need positive values, value heads (time_step_rank) a "
        "multiple of key heads (group_count), inner_size = value heads x state_size",
        hp_.ssm_d_conv, hp_.ssm_d_inner, d, Hv, Hk));
  }
  uint32_t interval = 4;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "full_attention_interval", &interval, false));
  if (interval == 0) return Status::invalid_argument("full_attention_interval must be positive");
  hp_.recurrent_layer.assign(hp_.n_layer, 0);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    hp_.recurrent_layer[il] = (il + 1) % interval != 0 ? 1 : 0;
  }
  if (hp_.head_dim_k != hp_.head_dim_v) {
    return Status::not_supported("qwen35: key_length and value_length must be equal");
  }
  // Multi-axis RoPE sections: text puts the position on the first three axes; a fourth axis
  // (its position is 0 for text in llama.cpp) would make the rotation differ from plain RoPE.
  if (auto sections = f.get_array(f.arch_key("rope.dimension_sections")); sections.ok()) {
    const auto& items = (*sections)->items;
    if (items.size() >= 4) {
      const auto s3 = items[3].as_uint();
      if (!s3 || *s3 != 0) {
        return Status::not_supported(
            "rope.dimension_sections with a fourth section is not supported");
      }
    }
  }
  return Status();
}

Status Model::bind_qwen35_weights() {
  const HParams& hp = hp_;
  auto bind = [&](const std::string& name, int64_t ne0, int64_t ne1, bool required, bool f32,
                  Weight* out) -> Status {
    return bind_tensor(file_, name, ne0, ne1, required, f32, out);
  };
  MNEMO_RETURN_IF_ERROR(bind_embedding_and_output());

  const int64_t D = hp.n_embd, d = hp.ssm_d_state, Hk = hp.ssm_n_group, Hv = hp.ssm_n_head;
  const int64_t n_qkv = 2 * Hk * d + Hv * d;
  const int64_t hd = hp.head_dim_k;
  layers_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = layers_[il];
    auto name = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    MNEMO_RETURN_IF_ERROR(bind(name("attn_norm.weight"), D, 1, true, true, &l.attn_norm));
    MNEMO_RETURN_IF_ERROR(bind(name("post_attention_norm.weight"), D, 1, true, true, &l.ffn_norm));
    if (hp.is_recurrent_layer(il)) {
      MNEMO_RETURN_IF_ERROR(bind(name("attn_qkv.weight"), D, n_qkv, true, false, &l.ssm_qkv));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_gate.weight"), D, Hv * d, true, false, &l.ssm_z));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ssm_conv1d.weight"), hp.ssm_d_conv, n_qkv, true, true, &l.ssm_conv1d));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_dt.bias"), Hv, 1, true, true, &l.ssm_dt_b));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_a"), Hv, 1, true, true, &l.ssm_a));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_beta.weight"), D, Hv, true, false, &l.ssm_beta));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_alpha.weight"), D, Hv, true, false, &l.ssm_alpha));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_norm.weight"), d, 1, true, true, &l.ssm_norm));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_out.weight"), Hv * d, D, true, false, &l.ssm_out));
    } else {
      const int64_t n_q = int64_t(hp.n_head) * hd;
      MNEMO_RETURN_IF_ERROR(bind(name("attn_q.weight"), D, 2 * n_q, true, false, &l.wq));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_k.weight"), D, hp.n_embd_k_gqa(), true, false, &l.wk));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_v.weight"), D, hp.n_embd_v_gqa(), true, false, &l.wv));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_output.weight"), n_q, D, true, false, &l.wo));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_q_norm.weight"), hd, 1, true, true, &l.attn_q_norm));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_k_norm.weight"), hd, 1, true, true, &l.attn_k_norm));
    }
    if (hp.is_moe()) {
      const int64_t E = hp.n_expert, F = hp.n_ff_exp, Fs = hp.n_ff_shexp;
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_gate_inp.weight"), D, E, true, false, &l.ffn_gate_inp));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_gate_exps.weight"), D, F * E, true, false, &l.ffn_gate_exps));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_up_exps.weight"), D, F * E, true, false, &l.ffn_up_exps));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_down_exps.weight"), F, D * E, true, false, &l.ffn_down_exps));
      if (Fs > 0) {
        MNEMO_RETURN_IF_ERROR(
            bind(name("ffn_gate_inp_shexp.weight"), D, 1, true, false, &l.ffn_gate_inp_shexp));
        MNEMO_RETURN_IF_ERROR(
            bind(name("ffn_gate_shexp.weight"), D, Fs, true, false, &l.ffn_gate_shexp));
        MNEMO_RETURN_IF_ERROR(
            bind(name("ffn_up_shexp.weight"), D, Fs, true, false, &l.ffn_up_shexp));
        MNEMO_RETURN_IF_ERROR(
            bind(name("ffn_down_shexp.weight"), Fs, D, true, false, &l.ffn_down_shexp));
      }
    } else {
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_gate.weight"), D, hp.n_ff, true, false, &l.ffn_gate));
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_up.weight"), D, hp.n_ff, true, false, &l.ffn_up));
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_down.weight"), hp.n_ff, D, true, false, &l.ffn_down));
    }
  }
  return Status();
}

}  // namespace mnemo
