// Tiny random-weight mamba2 and granitehybrid GGUF files for write_tiny_model, with the
// tensor names, shapes and metadata keys llama.cpp's converter writes (convert_hf_to_gguf.py
// Mamba2Model / GraniteHybridModel; gguf-py constants.py):
//
//   mamba2         2 Mamba-2 blocks; feed_forward_length = head_count = 0 as the converter writes.
//   granitehybrid  4 blocks: Mamba-2, attention, Mamba-2, Mamba-2 (attention.head_count_kv =
//                  [0, 2, 0, 0]: 0 marks a Mamba-2 layer), each with a SwiGLU feed-forward;
//                  Granite 4.0-H's multipliers (embedding_scale, residual_scale, attention.scale,
//                  logit_scale) and rope.scaling.finetuned = false (no RoPE); --rope writes it
//                  true (Bamba's layout: RoPE "norm" in the attention layer).
//
// Shapes (Mamba-2 as in the paper, scaled down): n_embd 256, d_inner 512 = 2 n_embd (the
// converter asserts the expansion factor 2), 8 heads of 64 (ssm.time_step_rank = 8), d_state 32,
// 2 groups, d_conv 4; attention 4 query heads of 64, 2 KV heads; n_ff 512; vocab 512.
// Initialisation follows Mamba-2's: A = -exp(A_log) with A_log = log(U[1, 16]); dt_bias the
// inverse softplus of dt ~ exp(U[log 0.001, log 0.1]); D = 1; so states carry over many tokens.
#include "support/tiny_ssm_model.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "support/tiny_model.h"

namespace mnemo::testing {
namespace {

using gguf::Value;

struct Writer {
  gguf::Writer w;
  std::mt19937 rng;
  bool all_f32 = false;

  void key(const std::string& k, Value v) {
    Status st = w.add(k, std::move(v));
    CHECK(st.ok()) << st.to_string();
  }
  void tensor(const std::string& name, std::vector<int64_t> dims, GgmlType t,
              const std::vector<float>& f) {
    if (all_f32) t = GgmlType::F32;
    const int64_t n_in = dims[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) n_rows *= dims[i];
    const size_t rb = row_size(t, n_in);
    // K-quants: random blocks (our writer has no K-quant quantizer); f is not read and may be
    // empty.
    if (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) {
      Status st =
          w.add_tensor(name, std::move(dims), t, random_kquant_weights(t, n_rows, n_in, rng()));
      CHECK(st.ok()) << name << ": " << st.to_string();
      return;
    }
    CHECK_EQ(f.size(), size_t(n_in * n_rows));
    std::vector<uint8_t> data(rb * size_t(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
      if (t == GgmlType::F32) {
        std::memcpy(data.data() + r * rb, f.data() + r * n_in, rb);
      } else {
        Status st = quantize_row(t, f.data() + r * n_in, data.data() + r * rb, n_in);
        CHECK(st.ok()) << name << ": " << st.to_string();
      }
    }
    Status st = w.add_tensor(name, std::move(dims), t, data);
    CHECK(st.ok()) << name << ": " << st.to_string();
  }
  std::vector<float> normal(size_t n, float mean, float stddev) {
    std::normal_distribution<float> d(mean, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
};

}  // namespace

Status write_tiny_ssm_model(const std::string& arch, const std::string& out,
                            const TinyModelOptions& options) {
  Writer W;
  W.all_f32 = options.all_f32;
  const uint32_t seed = options.seed;
  const bool rope = options.rope;
  W.rng.seed(seed);
  const bool granite = arch == "granitehybrid";
  const int64_t n_embd = 256, n_vocab = 512, d_inner = 512, H = 8, N = 32, G = 2, d_conv = 4;
  const int64_t n_ch = d_inner + 2 * G * N, d_in_proj = 2 * d_inner + 2 * G * N + H;
  const int64_t n_head = 4, n_head_kv = 2, hd = 64, n_ff = 512;
  const int64_t n_layer = granite ? 4 : 2;
  auto is_attention = [&](int64_t il) { return granite && il == 1; };

  W.key("general.architecture", Value::str(arch));
  W.key("general.name", Value::str("tiny-" + arch));
  W.key(arch + ".context_length", Value::u32(1u << 20));
  W.key(arch + ".embedding_length", Value::u32(n_embd));
  W.key(arch + ".block_count", Value::u32(n_layer));
  W.key(arch + ".vocab_size", Value::u32(n_vocab));
  W.key(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  W.key(arch + ".ssm.conv_kernel", Value::u32(d_conv));
  W.key(arch + ".ssm.inner_size", Value::u32(d_inner));
  W.key(arch + ".ssm.state_size", Value::u32(N));
  W.key(arch + ".ssm.time_step_rank", Value::u32(H));
  W.key(arch + ".ssm.group_count", Value::u32(G));
  if (granite) {
    W.key(arch + ".feed_forward_length", Value::u32(n_ff));
    W.key(arch + ".attention.head_count", Value::u32(n_head));
    std::vector<Value> kv;
    for (int64_t il = 0; il < n_layer; ++il)
      kv.push_back(Value::u32(is_attention(il) ? n_head_kv : 0));
    W.key(arch + ".attention.head_count_kv", Value::array(gguf::ValueType::UINT32, std::move(kv)));
    W.key(arch + ".rope.freq_base", Value::f32(10000.0f));
    W.key(arch + ".rope.scaling.finetuned", Value::boolean(rope));
    W.key(arch + ".embedding_scale", Value::f32(12.0f));
    W.key(arch + ".residual_scale", Value::f32(0.22f));
    W.key(arch + ".attention.scale", Value::f32(0.015625f));
    W.key(arch + ".logit_scale", Value::f32(4.0f));
  } else {
    W.key(arch + ".feed_forward_length", Value::u32(0));
    W.key(arch + ".attention.head_count", Value::u32(0));
  }

  // The tiny SentencePiece-style vocabulary (tiny_model.h), so llama.cpp and mnemo serve load it.
  for (auto& [k, v] : tiny_spm_vocab(n_vocab)) W.key(k, std::move(v));

  const float s_embd = 1.0f / std::sqrt(float(n_embd));
  W.tensor("token_embd.weight", {n_embd, n_vocab}, GgmlType::Q8_0,
           W.normal(n_embd * n_vocab, 0.0f, granite ? 0.1f : 1.0f));
  W.tensor("output_norm.weight", {n_embd}, GgmlType::F32, W.normal(n_embd, 1.0f, 0.1f));
  W.tensor("output.weight", {n_embd, n_vocab}, GgmlType::Q8_0,
           W.normal(n_embd * n_vocab, 0, s_embd));
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    W.tensor(p + "attn_norm.weight", {n_embd}, GgmlType::F32, W.normal(n_embd, 1.0f, 0.1f));
    if (is_attention(il)) {
      W.tensor(p + "attn_q.weight", {n_embd, n_head * hd}, GgmlType::Q8_0,
               W.normal(n_embd * n_head * hd, 0, s_embd));
      W.tensor(p + "attn_k.weight", {n_embd, n_head_kv * hd}, GgmlType::F16,
               W.normal(n_embd * n_head_kv * hd, 0, s_embd));
      W.tensor(p + "attn_v.weight", {n_embd, n_head_kv * hd}, GgmlType::Q4_0,
               W.normal(n_embd * n_head_kv * hd, 0, s_embd));
      W.tensor(p + "attn_output.weight", {n_head * hd, n_embd}, GgmlType::Q5_1,
               W.normal(n_head * hd * n_embd, 0, s_embd));
    } else {
      W.tensor(p + "ssm_in.weight", {n_embd, d_in_proj}, il % 2 ? GgmlType::F16 : GgmlType::Q8_0,
               W.normal(n_embd * d_in_proj, 0, s_embd));
      W.tensor(p + "ssm_conv1d.weight", {d_conv, n_ch}, GgmlType::F32,
               W.normal(d_conv * n_ch, 0, 0.5f));
      W.tensor(p + "ssm_conv1d.bias", {n_ch}, GgmlType::F32, W.normal(n_ch, 0, 0.1f));
      std::vector<float> dt_bias(H), a(H), d(H, 1.0f);
      for (int64_t h = 0; h < H; ++h) {
        const float dt = std::exp(W.uniform(1, std::log(0.001f), std::log(0.1f))[0]);
        dt_bias[h] = dt + std::log(-std::expm1(-dt));  // softplus(dt_bias) = dt
        a[h] = -W.uniform(1, 1.0f, 16.0f)[0];          // -exp(A_log), A_log = log U[1, 16]
      }
      W.tensor(p + "ssm_dt.bias", {H}, GgmlType::F32, dt_bias);
      W.tensor(p + "ssm_a", {1, H}, GgmlType::F32, a);
      W.tensor(p + "ssm_d", {1, H}, GgmlType::F32, d);
      W.tensor(p + "ssm_norm.weight", {d_inner / G, G}, GgmlType::F32,
               W.normal(d_inner, 1.0f, 0.1f));
      W.tensor(p + "ssm_out.weight", {d_inner, n_embd}, il % 2 ? GgmlType::Q4_0 : GgmlType::BF16,
               W.normal(d_inner * n_embd, 0, 1.0f / std::sqrt(float(d_inner))));
    }
    if (granite) {
      W.tensor(p + "ffn_norm.weight", {n_embd}, GgmlType::F32, W.normal(n_embd, 1.0f, 0.1f));
      W.tensor(p + "ffn_gate.weight", {n_embd, n_ff}, GgmlType::Q5_0,
               W.normal(n_embd * n_ff, 0, s_embd));
      W.tensor(p + "ffn_up.weight", {n_embd, n_ff}, GgmlType::BF16,
               W.normal(n_embd * n_ff, 0, s_embd));
      W.tensor(p + "ffn_down.weight", {n_ff, n_embd}, GgmlType::Q8_0,
               W.normal(n_ff * n_embd, 0, 1.0f / std::sqrt(float(n_ff))));
    }
  }
  return W.w.write(out);
}

// qwen35 / qwen35moe (Qwen3.5): Gated DeltaNet and gated attention layers, see
// tiny_ssm_model.h for the shapes.
Status write_tiny_qwen35_model(const std::string& name, const std::string& out,
                               const TinyModelOptions& options) {
  Writer W;
  W.all_f32 = options.all_f32;
  const uint32_t seed = options.seed;
  int64_t n_layer = options.n_layer > 0 ? options.n_layer : 0;  // 0: the shape's default
  W.rng.seed(seed);
  const bool bench = name == "qwen35-bench" || name == "qwen35moe-bench";
  const std::string arch = name == "qwen35-bench" ? "qwen35" : bench ? "qwen35moe" : name;
  const bool moe = arch == "qwen35moe";
  // Tiny shapes, or Qwen3.5-0.8B's (bench).
  int64_t n_embd = 256, n_vocab = 512, n_head = 4, n_head_kv = 2, hd = 64, n_rot = 16, n_ff = 512;
  int64_t Hk = 2, Hv = 4, d = 32, d_conv = 4, interval = 4;
  int64_t E = 8, E_used = 2, F = 128, Fs = 256;
  if (bench && !moe) {  // Qwen3.5-0.8B
    n_embd = 1024, n_vocab = 248320, n_head = 8, n_head_kv = 2, hd = 256, n_rot = 64, n_ff = 3584;
    Hk = 16, Hv = 16, d = 128;
    if (n_layer == 0) n_layer = 24;
  } else if (bench) {  // Qwen3.5-35B-A3B
    n_embd = 2048, n_vocab = 248320, n_head = 16, n_head_kv = 2, hd = 256, n_rot = 64;
    Hk = 16, Hv = 32, d = 128, E = 256, E_used = 8, F = 512, Fs = 512;
    if (n_layer == 0) n_layer = 4;
  }
  if (n_layer == 0) n_layer = 4;
  const int64_t n_qkv = 2 * Hk * d + Hv * d, n_v = Hv * d;
  // bench: Q4_K_M-like (q4_K, q6_K for ffn_down and the embeddings).
  auto T = [&](GgmlType t) {
    if (!bench) return t;
    return t == GgmlType::Q6_K || t == GgmlType::Q8_0 ? GgmlType::Q6_K : GgmlType::Q4_K;
  };

  W.key("general.architecture", Value::str(arch));
  W.key("general.name", Value::str(bench ? "qwen35-0.8b-shapes" : "tiny-" + arch));
  W.key(arch + ".context_length", Value::u32(262144));
  W.key(arch + ".embedding_length", Value::u32(n_embd));
  W.key(arch + ".block_count", Value::u32(n_layer));
  W.key(arch + ".attention.head_count", Value::u32(n_head));
  W.key(arch + ".attention.head_count_kv", Value::u32(n_head_kv));
  W.key(arch + ".attention.key_length", Value::u32(hd));
  W.key(arch + ".attention.value_length", Value::u32(hd));
  W.key(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  W.key(arch + ".rope.dimension_count", Value::u32(n_rot));
  W.key(arch + ".rope.freq_base", Value::f32(10000000.0f));
  // Sections of the interleaved multi-axis RoPE: the first three cover rope_dim / 2 pairs.
  const int64_t pairs = n_rot / 2, s0 = (pairs + 2) / 3, s1 = (pairs + 1) / 3;
  std::vector<Value> sections = {Value::i32(int32_t(s0)), Value::i32(int32_t(s1)),
                                 Value::i32(int32_t(pairs - s0 - s1)), Value::i32(0)};
  W.key(arch + ".rope.dimension_sections",
        Value::array(gguf::ValueType::INT32, std::move(sections)));
  W.key(arch + ".full_attention_interval", Value::u32(interval));
  W.key(arch + ".ssm.conv_kernel", Value::u32(d_conv));
  W.key(arch + ".ssm.state_size", Value::u32(d));
  W.key(arch + ".ssm.group_count", Value::u32(Hk));
  W.key(arch + ".ssm.time_step_rank", Value::u32(Hv));
  W.key(arch + ".ssm.inner_size", Value::u32(n_v));
  if (moe) {
    W.key(arch + ".expert_count", Value::u32(E));
    W.key(arch + ".expert_used_count", Value::u32(E_used));
    W.key(arch + ".expert_feed_forward_length", Value::u32(F));
    W.key(arch + ".expert_shared_feed_forward_length", Value::u32(Fs));
  } else {
    W.key(arch + ".feed_forward_length", Value::u32(n_ff));
  }
  for (auto& [k, v] : tiny_spm_vocab(n_vocab)) W.key(k, std::move(v));

  const float s_embd = 1.0f / std::sqrt(float(n_embd));
  // The embedding is also the output matrix of qwen35 (tied): 2 / sqrt(n_embd) keeps logits
  // O(1), as an untied output of 1 / sqrt(n_embd) does.
  W.tensor("token_embd.weight", {n_embd, n_vocab}, T(GgmlType::Q8_0),
           W.normal(n_embd * n_vocab, 0.0f, moe ? 1.0f : 2.0f * s_embd));
  W.tensor("output_norm.weight", {n_embd}, GgmlType::F32, W.normal(n_embd, 1.0f, 0.1f));
  if (moe) {  // qwen35 ties the output to the embedding (as Qwen3.5-0.8B); qwen35moe does not
    W.tensor("output.weight", {n_embd, n_vocab}, T(GgmlType::Q8_0),
             W.normal(n_embd * n_vocab, 0, s_embd));
  }
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    W.tensor(p + "attn_norm.weight", {n_embd}, GgmlType::F32, W.normal(n_embd, 1.0f, 0.1f));
    W.tensor(p + "post_attention_norm.weight", {n_embd}, GgmlType::F32,
             W.normal(n_embd, 1.0f, 0.1f));
    if ((il + 1) % interval != 0) {  // Gated DeltaNet
      W.tensor(p + "attn_qkv.weight", {n_embd, n_qkv}, T(GgmlType::Q8_0),
               W.normal(n_embd * n_qkv, 0, s_embd));
      W.tensor(p + "attn_gate.weight", {n_embd, n_v}, T(GgmlType::F16),
               W.normal(n_embd * n_v, 0, s_embd));
      W.tensor(p + "ssm_conv1d.weight", {d_conv, n_qkv}, GgmlType::F32,
               W.normal(d_conv * n_qkv, 0, 0.5f));
      std::vector<float> dt_bias(static_cast<size_t>(Hv)), a(static_cast<size_t>(Hv));
      for (int64_t h = 0; h < Hv; ++h) {
        const float dt = std::exp(W.uniform(1, std::log(0.001f), std::log(0.1f))[0]);
        dt_bias[size_t(h)] = dt + std::log(-std::expm1(-dt));  // softplus(dt_bias) = dt
        a[size_t(h)] = -W.uniform(1, 1.0f, 16.0f)[0];          // -exp(A_log), A_log = log U[1, 16]
      }
      W.tensor(p + "ssm_dt.bias", {Hv}, GgmlType::F32, dt_bias);
      W.tensor(p + "ssm_a", {Hv}, GgmlType::F32, a);
      W.tensor(p + "ssm_beta.weight", {n_embd, Hv}, T(GgmlType::BF16),
               W.normal(n_embd * Hv, 0, s_embd));
      W.tensor(p + "ssm_alpha.weight", {n_embd, Hv}, T(GgmlType::F32),
               W.normal(n_embd * Hv, 0, s_embd));
      W.tensor(p + "ssm_norm.weight", {d}, GgmlType::F32, W.normal(d, 1.0f, 0.1f));
      W.tensor(p + "ssm_out.weight", {n_v, n_embd}, T(GgmlType::Q5_0),
               W.normal(n_v * n_embd, 0, 1.0f / std::sqrt(float(n_v))));
    } else {  // gated attention
      W.tensor(p + "attn_q.weight", {n_embd, 2 * n_head * hd}, T(GgmlType::Q8_0),
               W.normal(n_embd * 2 * n_head * hd, 0, s_embd));
      W.tensor(p + "attn_k.weight", {n_embd, n_head_kv * hd}, T(GgmlType::F16),
               W.normal(n_embd * n_head_kv * hd, 0, s_embd));
      W.tensor(p + "attn_v.weight", {n_embd, n_head_kv * hd}, T(GgmlType::Q4_0),
               W.normal(n_embd * n_head_kv * hd, 0, s_embd));
      W.tensor(p + "attn_output.weight", {n_head * hd, n_embd}, T(GgmlType::Q5_1),
               W.normal(n_head * hd * n_embd, 0, 1.0f / std::sqrt(float(n_head * hd))));
      W.tensor(p + "attn_q_norm.weight", {hd}, GgmlType::F32, W.normal(hd, 1.0f, 0.1f));
      W.tensor(p + "attn_k_norm.weight", {hd}, GgmlType::F32, W.normal(hd, 1.0f, 0.1f));
    }
    if (moe) {
      // bench: q4_K experts with q6_K down projections, as a Q4_K_M file; the writer draws no
      // floats for K-quants (random blocks), which keeps a 256-expert file quick to write.
      auto X = [&](GgmlType t, GgmlType kquant) { return bench ? kquant : t; };
      auto draw = [&](int64_t n, float sd) {
        return bench ? std::vector<float>() : W.normal(n, 0, sd);
      };
      W.tensor(p + "ffn_gate_inp.weight", {n_embd, E}, GgmlType::F32,
               W.normal(n_embd * E, 0, s_embd));
      W.tensor(p + "ffn_gate_exps.weight", {n_embd, F, E}, X(GgmlType::Q4_0, GgmlType::Q4_K),
               draw(n_embd * F * E, s_embd));
      W.tensor(p + "ffn_up_exps.weight", {n_embd, F, E}, X(GgmlType::Q5_0, GgmlType::Q4_K),
               draw(n_embd * F * E, s_embd));
      W.tensor(p + "ffn_down_exps.weight", {F, n_embd, E}, X(GgmlType::Q8_0, GgmlType::Q6_K),
               draw(F * n_embd * E, 1.0f / std::sqrt(float(F))));
      W.tensor(p + "ffn_gate_inp_shexp.weight", {n_embd}, GgmlType::F32,
               W.normal(n_embd, 0, s_embd));
      W.tensor(p + "ffn_gate_shexp.weight", {n_embd, Fs}, X(GgmlType::Q4_1, GgmlType::Q4_K),
               draw(n_embd * Fs, s_embd));
      W.tensor(p + "ffn_up_shexp.weight", {n_embd, Fs}, X(GgmlType::Q5_1, GgmlType::Q4_K),
               draw(n_embd * Fs, s_embd));
      W.tensor(p + "ffn_down_shexp.weight", {Fs, n_embd}, X(GgmlType::Q8_0, GgmlType::Q6_K),
               draw(Fs * n_embd, 1.0f / std::sqrt(float(Fs))));
    } else {
      W.tensor(p + "ffn_gate.weight", {n_embd, n_ff}, T(GgmlType::Q4_K),
               W.normal(n_embd * n_ff, 0, s_embd));
      W.tensor(p + "ffn_up.weight", {n_embd, n_ff}, T(GgmlType::Q5_K),
               W.normal(n_embd * n_ff, 0, s_embd));
      W.tensor(p + "ffn_down.weight", {n_ff, n_embd}, T(GgmlType::Q6_K),
               W.normal(n_ff * n_embd, 0, 1.0f / std::sqrt(float(n_ff))));
    }
  }
  return W.w.write(out);
}

}  // namespace mnemo::testing
