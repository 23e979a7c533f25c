// Loading of the recurrent architectures: hyper-parameters and weights of mamba2 (Mamba-2 blocks
// only) and granitehybrid (IBM Granite 4.0-H: Mamba-2 and attention blocks, each followed by a
// SwiGLU feed-forward; also Bamba, which llama.cpp converts to the same architecture).
//
// Metadata keys and tensor names are those llama.cpp's converter writes (gguf-py constants.py:
// MODEL_ARCH.MAMBA2 / GRANITE_HYBRID, Keys.SSM; convert_hf_to_gguf.py Mamba2Model and
// GraniteHybridModel):
//   {arch}.ssm.conv_kernel, .ssm.inner_size, .ssm.state_size, .ssm.time_step_rank (= the number
//   of Mamba-2 heads), .ssm.group_count; mamba2 writes feed_forward_length = head_count = 0.
//   granitehybrid: attention.head_count_kv is an array with 0 for each Mamba-2 layer;
//   rope.scaling.finetuned = false means no RoPE (Granite 4.0-H), true (Bamba) RoPE "norm";
//   embedding_scale, residual_scale, attention.scale, logit_scale (Granite's multipliers).
//   blk.N.ssm_in.weight [n_embd, 2 d_inner + 2 n_group d_state + n_head]
//   blk.N.ssm_conv1d.weight [d_conv, d_inner + 2 n_group d_state], .bias [that]
//   blk.N.ssm_dt.bias [n_head]; blk.N.ssm_a, blk.N.ssm_d [1, n_head] (no ".weight" suffix;
//   ssm_a holds -exp(A_log)); blk.N.ssm_norm.weight [d_inner / n_group, n_group];
//   blk.N.ssm_out.weight [d_inner, n_embd].
#include <fmt/format.h>

#include <cmath>

#include "mnemo/model.h"
#include "model/load_util.h"

namespace mnemo {
namespace {

using model_load::read_f32_key;
using model_load::read_u32_key;

// A key that is either one integer for every layer or an array of n_layer integers.
Status read_per_layer(const gguf::File& f, const char* suffix, uint32_t n_layer,
                      std::vector<uint32_t>* out, bool required) {
  const std::string key = f.arch_key(suffix);
  const gguf::Value* v = f.find(key);
  if (v == nullptr) {
    return required ? Status::invalid_argument("missing hyper-parameter " + key) : Status();
  }
  out->assign(n_layer, 0);
  if (const gguf::Array* a = v->as_array()) {
    if (a->items.size() != n_layer) {
      return Status::invalid_argument(
          fmt::format("{} has {} entries for {} layers", key, a->items.size(), n_layer));
    }
    for (uint32_t il = 0; il < n_layer; ++il) {
      const auto u = a->items[il].as_uint();
      if (!u || *u > 0xFFFFFFFFull) return Status::invalid_argument(key + ": bad entry");
      (*out)[il] = static_cast<uint32_t>(*u);
    }
    return Status();
  }
  const auto u = v->as_uint();
  if (!u || *u > 0xFFFFFFFFull) return Status::invalid_argument(key + ": not an integer");
  out->assign(n_layer, static_cast<uint32_t>(*u));
  return Status();
}

}  // namespace

Status Model::load_ssm_hparams() {
  const gguf::File& f = file_;
  const bool granite = hp_.arch == Arch::kGraniteHybrid;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "context_length", &hp_.n_ctx_train, false));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "embedding_length", &hp_.n_embd, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "block_count", &hp_.n_layer, true));
  if (hp_.n_embd == 0 || hp_.n_layer == 0 || hp_.n_layer > 4096 || hp_.n_embd > (1u << 20)) {
    return Status::invalid_argument("embedding_length / block_count out of range");
  }
  MNEMO_RETURN_IF_ERROR(read_f32_key(f, "attention.layer_norm_rms_epsilon", &hp_.rms_eps));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.conv_kernel", &hp_.ssm_d_conv, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.inner_size", &hp_.ssm_d_inner, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.state_size", &hp_.ssm_d_state, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.time_step_rank", &hp_.ssm_n_head, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "ssm.group_count", &hp_.ssm_n_group, true));
  const uint32_t H = hp_.ssm_n_head, G = hp_.ssm_n_group;
  if (hp_.ssm_d_conv == 0 || hp_.ssm_d_conv > 64 || hp_.ssm_d_state == 0 ||
      hp_.ssm_d_state > 4096 || H == 0 || G == 0 || hp_.ssm_d_inner == 0 ||
      hp_.ssm_d_inner > (1u << 20) || hp_.ssm_d_inner % H != 0 || H % G != 0) {
    return Status::invalid_argument(fmt::format(
        "ssm hyper-parameters conv_kernel {} inner_size {} state_size {} time_step_rank {} "
        "group_count {}: need positive values, inner_size divisible by time_step_rank (heads) and "
        "time_step_rank by group_count",
        hp_.ssm_d_conv, hp_.ssm_d_inner, hp_.ssm_d_state, H, G));
  }
  hp_.recurrent_layer.assign(hp_.n_layer, 1);
  hp_.rope_dim = 0;
  hp_.head_dim_k = hp_.head_dim_v = 0;

  if (granite) {
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.head_count", &hp_.n_head, true));
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "feed_forward_length", &hp_.n_ff, true));
    if (hp_.n_head == 0 || hp_.n_ff == 0 || hp_.n_head > 4096) {
      return Status::invalid_argument(
          "granitehybrid: head_count and feed_forward_length must be "
          "positive");
    }
    uint32_t n_expert = 0;
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "expert_count", &n_expert, false));
    if (n_expert > 0) {
      return Status::not_supported(
          "granitehybrid with mixture-of-experts feed-forward layers "
          "(Granite 4.0-H Tiny / Small) is not supported yet; the dense "
          "ones (H Micro, H 1B, H 350M) are");
    }
    std::vector<uint32_t> n_head_kv;
    MNEMO_RETURN_IF_ERROR(
        read_per_layer(f, "attention.head_count_kv", hp_.n_layer, &n_head_kv, true));
    hp_.n_head_kv = 0;
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
      if (n_head_kv[il] == 0) continue;  // a Mamba-2 layer
      if (hp_.n_head_kv != 0 && n_head_kv[il] != hp_.n_head_kv) {
        return Status::not_supported(
            "granitehybrid: attention layers with different "
            "head_count_kv");
      }
      hp_.n_head_kv = n_head_kv[il];
      hp_.recurrent_layer[il] = 0;
    }
    if (hp_.n_head_kv == 0 || hp_.n_head % hp_.n_head_kv != 0) {
      return Status::invalid_argument(fmt::format(
          "granitehybrid: head_count_kv {} of the attention layers must divide head_count {}",
          hp_.n_head_kv, hp_.n_head));
    }
    hp_.head_dim_k = hp_.n_embd / hp_.n_head;
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.key_length", &hp_.head_dim_k, false));
    hp_.head_dim_v = hp_.head_dim_k;
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.value_length", &hp_.head_dim_v, false));
    if (hp_.head_dim_k == 0 || hp_.head_dim_k % 2 != 0) {
      return Status::invalid_argument("granitehybrid: key_length must be positive and even");
    }
    // Granite uses rope.scaling.finetuned as the switch for RoPE (default on); the converter
    // writes false for Granite 4.0-H (no positional encoding in its attention layers).
    bool use_rope = true;
    if (const gguf::Value* v = f.find(f.arch_key("rope.scaling.finetuned"))) {
      const auto b = v->as_bool();
      if (!b) return Status::invalid_argument("rope.scaling.finetuned must be a bool");
      use_rope = *b;
    }
    if (use_rope) {
      hp_.rope_dim = hp_.head_dim_k;
      MNEMO_RETURN_IF_ERROR(read_u32_key(f, "rope.dimension_count", &hp_.rope_dim, false));
      if (hp_.rope_dim == 0 || hp_.rope_dim > hp_.head_dim_k || hp_.rope_dim % 2 != 0) {
        return Status::invalid_argument("rope.dimension_count must be even and <= key_length");
      }
      MNEMO_RETURN_IF_ERROR(read_f32_key(f, "rope.freq_base", &hp_.rope_freq_base));
      hp_.rope_mode = kernels::RopeMode::kNormal;
    }
    // The multipliers: a missing or zero value means "no scaling", as in llama.cpp.
    float s = 0.0f;
    MNEMO_RETURN_IF_ERROR(read_f32_key(f, "embedding_scale", &s));
    hp_.embd_scale = s != 0.0f ? s : 1.0f;
    s = 0.0f;
    MNEMO_RETURN_IF_ERROR(read_f32_key(f, "residual_scale", &s));
    hp_.residual_scale = s != 0.0f ? s : 1.0f;
    s = 0.0f;
    MNEMO_RETURN_IF_ERROR(read_f32_key(f, "logit_scale", &s));
    hp_.logit_scale = s != 0.0f ? s : 1.0f;
    s = 0.0f;
    MNEMO_RETURN_IF_ERROR(read_f32_key(f, "attention.scale", &s));
    hp_.attn_scale = s != 0.0f ? s : 1.0f / std::sqrt(float(hp_.head_dim_k));
  }

  return model_load::read_n_vocab(f, &hp_.n_vocab);
}

Status Model::bind_embedding_and_output() {
  const gguf::TensorInfo* embd = file_.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return Status::invalid_argument("missing or malformed tensor token_embd.weight");
  }
  if (hp_.n_vocab == 0) hp_.n_vocab = static_cast<uint32_t>(embd->dims[1]);
  MNEMO_RETURN_IF_ERROR(model_load::bind_tensor(file_, "token_embd.weight", hp_.n_embd, hp_.n_vocab,
                                                true, false, &token_embd_));
  MNEMO_RETURN_IF_ERROR(model_load::bind_tensor(file_, "output_norm.weight", hp_.n_embd, 1, true,
                                                true, &output_norm_));
  MNEMO_RETURN_IF_ERROR(model_load::bind_tensor(file_, "output.weight", hp_.n_embd, hp_.n_vocab,
                                                false, false, &output_));
  if (!output_.present()) {
    output_ = token_embd_;
    hp_.tied_output = true;
  }
  return Status();
}

Status Model::bind_ssm_weights() {
  const HParams& hp = hp_;
  auto bind = [&](const std::string& name, int64_t ne0, int64_t ne1, bool required, bool f32,
                  Weight* out) -> Status {
    return model_load::bind_tensor(file_, name, ne0, ne1, required, f32, out);
  };

  MNEMO_RETURN_IF_ERROR(bind_embedding_and_output());

  const bool granite = hp.arch == Arch::kGraniteHybrid;
  const int64_t H = hp.ssm_n_head, G = hp.ssm_n_group, d_inner = hp.ssm_d_inner;
  const int64_t n_ch = hp.ssm_conv_channels();
  const int64_t d_in_proj = 2 * d_inner + 2 * G * hp.ssm_d_state + H;
  const int64_t n_q = int64_t(hp.n_head) * hp.head_dim_k;
  const int64_t n_attn_out = int64_t(hp.n_head) * hp.head_dim_v;
  layers_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = layers_[il];
    auto name = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    MNEMO_RETURN_IF_ERROR(bind(name("attn_norm.weight"), hp.n_embd, 1, true, true, &l.attn_norm));
    if (hp.is_recurrent_layer(il)) {
      MNEMO_RETURN_IF_ERROR(
          bind(name("ssm_in.weight"), hp.n_embd, d_in_proj, true, false, &l.ssm_in));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ssm_conv1d.weight"), hp.ssm_d_conv, n_ch, true, true, &l.ssm_conv1d));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ssm_conv1d.bias"), n_ch, 1, !granite, true, &l.ssm_conv1d_b));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_dt.bias"), H, 1, true, true, &l.ssm_dt_b));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_a"), 1, H, true, true, &l.ssm_a));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_d"), 1, H, true, true, &l.ssm_d));
      MNEMO_RETURN_IF_ERROR(bind(name("ssm_norm.weight"), d_inner / G, G, true, true, &l.ssm_norm));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ssm_out.weight"), d_inner, hp.n_embd, true, false, &l.ssm_out));
    } else {
      MNEMO_RETURN_IF_ERROR(bind(name("attn_q.weight"), hp.n_embd, n_q, true, false, &l.wq));
      MNEMO_RETURN_IF_ERROR(
          bind(name("attn_k.weight"), hp.n_embd, hp.n_embd_k_gqa(), true, false, &l.wk));
      MNEMO_RETURN_IF_ERROR(
          bind(name("attn_v.weight"), hp.n_embd, hp.n_embd_v_gqa(), true, false, &l.wv));
      MNEMO_RETURN_IF_ERROR(
          bind(name("attn_output.weight"), n_attn_out, hp.n_embd, true, false, &l.wo));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_q.bias"), n_q, 1, false, true, &l.bq));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_k.bias"), hp.n_embd_k_gqa(), 1, false, true, &l.bk));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_v.bias"), hp.n_embd_v_gqa(), 1, false, true, &l.bv));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_output.bias"), hp.n_embd, 1, false, true, &l.bo));
    }
    if (granite) {
      if (file_.find_tensor(name("ffn_gate_inp.weight")) != nullptr) {
        return Status::not_supported(name("ffn_gate_inp.weight") +
                                     ": mixture-of-experts layers are not supported yet");
      }
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_norm.weight"), hp.n_embd, 1, true, true, &l.ffn_norm));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_gate.weight"), hp.n_embd, hp.n_ff, true, false, &l.ffn_gate));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_up.weight"), hp.n_embd, hp.n_ff, true, false, &l.ffn_up));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_down.weight"), hp.n_ff, hp.n_embd, true, false, &l.ffn_down));
    }
  }
  return Status();
}

}  // namespace mnemo
