// Tiny random-weight models for tests: see tiny_model.h.
#include "tiny_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "quant/blocks.h"

namespace mnemo::testing {
namespace {

using mnemo::GgmlType;
using mnemo::gguf::Value;

struct Gen {
  std::mt19937 rng;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::uniform_int_distribution<int> byte{0, 255};
};

// Random K-quant blocks: random quants and sub-block scales, small positive fp16 super-scales.
std::vector<uint8_t> random_kquant(GgmlType t, int64_t n_rows, int64_t n_in, Gen& g) {
  const size_t bytes = mnemo::row_size(t, n_in) * size_t(n_rows);
  std::vector<uint8_t> out(bytes);
  for (auto& b : out) b = uint8_t(g.byte(g.rng));
  const int64_t n_blocks = int64_t(bytes / mnemo::type_size(t));
  const float scale = 1.0f / std::sqrt(float(n_in));
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = out.data() + size_t(i) * mnemo::type_size(t);
    if (t == GgmlType::Q4_K) {
      auto* b = reinterpret_cast<mnemo::block_q4_K*>(blk);
      b->d = mnemo::fp32_to_fp16(scale / 40.0f);
      b->dmin = mnemo::fp32_to_fp16(scale / 80.0f);
    } else if (t == GgmlType::Q5_K) {
      auto* b = reinterpret_cast<mnemo::block_q5_K*>(blk);
      b->d = mnemo::fp32_to_fp16(scale / 80.0f);
      b->dmin = mnemo::fp32_to_fp16(scale / 160.0f);
    } else if (t == GgmlType::Q6_K) {
      auto* b = reinterpret_cast<mnemo::block_q6_K*>(blk);
      for (auto& s : b->scales) s = int8_t(int(s) % 64);
      b->d = mnemo::fp32_to_fp16(scale / 600.0f);
    }
  }
  return out;
}

std::vector<uint8_t> make_weight(GgmlType t, int64_t n_rows, int64_t n_in, Gen& g, float mean,
                                 float stddev) {
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) {
    return random_kquant(t, n_rows, n_in, g);
  }
  std::vector<float> f(size_t(n_rows * n_in));
  for (auto& x : f) x = mean + stddev * g.normal(g.rng);
  std::vector<uint8_t> out(mnemo::row_size(t, n_in) * size_t(n_rows));
  const size_t rb = mnemo::row_size(t, n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    if (t == GgmlType::F32) {
      std::memcpy(out.data() + r * rb, f.data() + r * n_in, rb);
    } else {
      mnemo::Status st = mnemo::quantize_row(t, f.data() + r * n_in, out.data() + r * rb, n_in);
      if (!st.ok()) {
        std::fprintf(stderr, "quantize: %s\n", st.to_string().c_str());
        std::exit(1);
      }
    }
  }
  return out;
}

}  // namespace

Status write_tiny_model(const std::string& arch, const std::string& out, uint32_t seed,
                        bool all_f32) {
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "gemma3") {
    return Status::invalid_argument("unknown arch " + arch + " (llama, qwen2, qwen3, gemma3)");
  }
  Status status;
  const bool gemma = arch == "gemma3";
  const int64_t n_embd = 256, n_ff = 512, n_head = 4, n_head_kv = 2, hd = 64, n_vocab = 512;
  const int64_t n_layer = gemma ? 6 : 2;
  Gen g{std::mt19937(seed)};
  mnemo::gguf::Writer w;
  auto add = [&](const std::string& k, Value v) {
    mnemo::Status st = w.add(k, std::move(v));
    if (!st.ok() && status.ok()) status = st;
  };
  add("general.architecture", Value::str(arch));
  add("general.name", Value::str("tiny-" + arch));
  add(arch + ".context_length", Value::u32(2048));
  add(arch + ".embedding_length", Value::u32(n_embd));
  add(arch + ".block_count", Value::u32(n_layer));
  add(arch + ".feed_forward_length", Value::u32(n_ff));
  add(arch + ".attention.head_count", Value::u32(n_head));
  add(arch + ".attention.head_count_kv", Value::u32(n_head_kv));
  add(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  add(arch + ".rope.freq_base", Value::f32(gemma ? 1000000.0f : 10000.0f));
  add(arch + ".vocab_size", Value::u32(n_vocab));
  if (gemma || arch == "qwen3") {
    add(arch + ".attention.key_length", Value::u32(hd));
    add(arch + ".attention.value_length", Value::u32(hd));
  }
  if (gemma) add(arch + ".attention.sliding_window", Value::u32(8));

  auto T = [&](GgmlType t) { return all_f32 ? GgmlType::F32 : t; };
  auto tensor = [&](const std::string& name, std::vector<int64_t> dims, GgmlType t, float mean,
                    float stddev) {
    const int64_t n_in = dims[0];
    const int64_t n_rows = dims.size() > 1 ? dims[1] : 1;
    auto data = make_weight(t, n_rows, n_in, g, mean, stddev);
    mnemo::Status st = w.add_tensor(name, dims, t, data);
    if (!st.ok() && status.ok()) status = st.with_context(name);
  };
  const float s_embd = 1.0f / std::sqrt(float(n_embd));
  const float s_ff = 1.0f / std::sqrt(float(n_ff));
  tensor("token_embd.weight", {n_embd, n_vocab}, T(GgmlType::Q8_0), 0.0f, 1.0f);
  tensor("output_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
  if (!gemma) tensor("output.weight", {n_embd, n_vocab}, T(GgmlType::Q6_K), 0.0f, s_embd);
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    tensor(p + "attn_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
    tensor(p + "attn_q.weight", {n_embd, n_head * hd}, T(GgmlType::Q8_0), 0.0f, s_embd);
    tensor(p + "attn_k.weight", {n_embd, n_head_kv * hd}, T(GgmlType::F16), 0.0f, s_embd);
    tensor(p + "attn_v.weight", {n_embd, n_head_kv * hd}, T(GgmlType::Q4_0), 0.0f, s_embd);
    tensor(p + "attn_output.weight", {n_head * hd, n_embd}, T(GgmlType::Q4_1), 0.0f, s_embd);
    if (arch == "qwen2") {
      tensor(p + "attn_q.bias", {n_head * hd}, GgmlType::F32, 0.0f, 0.1f);
      tensor(p + "attn_k.bias", {n_head_kv * hd}, GgmlType::F32, 0.0f, 0.1f);
      tensor(p + "attn_v.bias", {n_head_kv * hd}, GgmlType::F32, 0.0f, 0.1f);
    }
    if (arch == "qwen3" || gemma) {
      tensor(p + "attn_q_norm.weight", {hd}, GgmlType::F32, 1.0f, 0.1f);
      tensor(p + "attn_k_norm.weight", {hd}, GgmlType::F32, 1.0f, 0.1f);
    }
    if (gemma) tensor(p + "post_attention_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
    tensor(p + "ffn_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
    tensor(p + "ffn_gate.weight", {n_embd, n_ff}, T(il % 2 ? GgmlType::Q4_K : GgmlType::Q5_0), 0.0f,
           s_embd);
    tensor(p + "ffn_up.weight", {n_embd, n_ff}, T(il % 2 ? GgmlType::Q5_K : GgmlType::BF16), 0.0f,
           s_embd);
    tensor(p + "ffn_down.weight", {n_ff, n_embd}, T(il % 2 ? GgmlType::Q6_K : GgmlType::Q8_0), 0.0f,
           s_ff);
    if (gemma) tensor(p + "post_ffw_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
  }
  MNEMO_RETURN_IF_ERROR(status);
  return w.write(out);
}

}  // namespace mnemo::testing
