// Tiny random-weight models for tests: see tiny_model.h.
#include "support/tiny_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "quant/blocks.h"
#include "support/tiny_ssm_model.h"

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

std::vector<uint8_t> random_kquant_weights(GgmlType t, int64_t n_rows, int64_t n_in,
                                           uint32_t seed) {
  Gen g;
  g.rng.seed(seed);
  return random_kquant(t, n_rows, n_in, g);
}

std::vector<std::pair<std::string, Value>> tiny_spm_vocab(int64_t n_vocab) {
  std::vector<Value> toks, scores, types;
  auto piece = [&](std::string t, float score, int32_t type) {
    toks.push_back(Value::str(std::move(t)));
    scores.push_back(Value::f32(score));
    types.push_back(Value::i32(type));
  };
  piece("<unk>", 0, 2);
  piece("<s>", 0, 3);
  piece("</s>", 0, 3);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) piece(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, 6);
  for (int c = 33; toks.size() < size_t(n_vocab) && c < 127; ++c) {
    piece("\xE2\x96\x81" + std::string(1, char(c)), -float(c), 1);
    if (toks.size() < size_t(n_vocab)) piece(std::string(1, char(c)), -100.0f - float(c), 1);
  }
  for (int k = 0; toks.size() < size_t(n_vocab); ++k) {
    piece("<extra_" + std::to_string(k) + ">", -1000, 1);
  }
  std::vector<std::pair<std::string, Value>> out;
  out.emplace_back("tokenizer.ggml.model", Value::str("llama"));
  out.emplace_back("tokenizer.ggml.tokens", Value::array(gguf::ValueType::STRING, std::move(toks)));
  out.emplace_back("tokenizer.ggml.scores",
                   Value::array(gguf::ValueType::FLOAT32, std::move(scores)));
  out.emplace_back("tokenizer.ggml.token_type",
                   Value::array(gguf::ValueType::INT32, std::move(types)));
  out.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(1));
  out.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(2));
  out.emplace_back("tokenizer.ggml.unknown_token_id", Value::u32(0));
  return out;
}

namespace {

struct Shape {
  int64_t n_embd = 256, n_ff = 512, n_head = 4, n_head_kv = 2, hd = 64, n_vocab = 512;
  int64_t n_layer = 2;
  int64_t n_expert = 8, n_expert_used = 2, n_ff_exp = 256;
  bool bench = false;  // Q4_K_M-like types for every matrix
};

Status write_model(const std::string& arch, const std::string& out, uint32_t seed, bool all_f32,
                   Shape shape);

Status write_moe_bench_model(const std::string& out, uint32_t seed, int64_t n_layer) {
  Shape shape;
  shape.n_embd = 2048;
  shape.n_ff = 6144;
  shape.n_head = 32;
  shape.n_head_kv = 4;
  shape.hd = 128;
  shape.n_layer = n_layer;
  shape.n_expert = 128;
  shape.n_expert_used = 8;
  shape.n_ff_exp = 768;
  shape.bench = true;
  return write_model("qwen3moe", out, seed, false, shape);
}

}  // namespace

Status write_tiny_model(const std::string& arch, const std::string& path,
                        const TinyModelOptions& options) {
  if (arch == "mamba2" || arch == "granitehybrid") {
    return write_tiny_ssm_model(arch, path, options);
  }
  if (arch == "qwen35" || arch == "qwen35moe" || arch == "qwen35-bench" ||
      arch == "qwen35moe-bench") {
    return write_tiny_qwen35_model(arch, path, options);
  }
  if (arch == "qwen3moe-bench") {
    return write_moe_bench_model(path, options.seed, options.n_layer > 0 ? options.n_layer : 2);
  }
  Shape shape;
  if (arch == "gemma3") shape.n_layer = 6;
  return write_model(arch, path, options.seed, options.all_f32, shape);
}

namespace {

Status write_model(const std::string& arch, const std::string& out, uint32_t seed, bool all_f32,
                   Shape shape) {
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen3moe" &&
      arch != "gemma3") {
    return Status::invalid_argument(
        "unknown arch " + arch +
        " (llama, qwen2, qwen3, qwen3moe, gemma3, mamba2, granitehybrid, qwen35, qwen35moe,"
        " qwen3moe-bench, qwen35-bench, qwen35moe-bench)");
  }
  Status status;
  const bool gemma = arch == "gemma3";
  const bool moe = arch == "qwen3moe";
  // qwen3moe: by default 8 experts of width 256, 2 per token (llama.cpp's qwen3moe keys and
  // tensors).
  const int64_t n_expert = shape.n_expert, n_expert_used = shape.n_expert_used,
                n_ff_exp = shape.n_ff_exp;
  const int64_t n_embd = shape.n_embd, n_ff = shape.n_ff, n_head = shape.n_head,
                n_head_kv = shape.n_head_kv, hd = shape.hd, n_vocab = shape.n_vocab;
  const int64_t n_layer = shape.n_layer;
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
  if (moe) {
    add(arch + ".expert_count", Value::u32(n_expert));
    add(arch + ".expert_used_count", Value::u32(n_expert_used));
    add(arch + ".expert_feed_forward_length", Value::u32(n_ff_exp));
  }
  if (gemma || arch == "qwen3" || moe) {
    add(arch + ".attention.key_length", Value::u32(hd));
    add(arch + ".attention.value_length", Value::u32(hd));
  }
  if (gemma) add(arch + ".attention.sliding_window", Value::u32(8));
  // qwen3moe is checked against llama.cpp, which needs a tokenizer in the file.
  if (moe) {
    for (auto& [k, v] : tiny_spm_vocab(n_vocab)) add(k, std::move(v));
  }

  // bench: Q4_K_M-like (q4_K everywhere, q6_K for ffn_down and the output).
  auto T = [&](GgmlType t) {
    if (shape.bench)
      return t == GgmlType::Q6_K || t == GgmlType::Q8_0 ? GgmlType::Q6_K : GgmlType::Q4_K;
    return all_f32 ? GgmlType::F32 : t;
  };
  auto tensor = [&](const std::string& name, std::vector<int64_t> dims, GgmlType t, float mean,
                    float stddev) {
    const int64_t n_in = dims[0];
    int64_t n_rows = 1;
    for (size_t d = 1; d < dims.size(); ++d) n_rows *= dims[d];
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
    if (arch == "qwen3" || gemma || moe) {
      tensor(p + "attn_q_norm.weight", {hd}, GgmlType::F32, 1.0f, 0.1f);
      tensor(p + "attn_k_norm.weight", {hd}, GgmlType::F32, 1.0f, 0.1f);
    }
    if (gemma) tensor(p + "post_attention_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
    tensor(p + "ffn_norm.weight", {n_embd}, GgmlType::F32, 1.0f, 0.1f);
    if (moe) {
      // The router in f32 (as real files keep it); the experts in the types real files ship.
      const float s_exp = 1.0f / std::sqrt(float(n_ff_exp));
      tensor(p + "ffn_gate_inp.weight", {n_embd, n_expert}, GgmlType::F32, 0.0f, 4.0f * s_embd);
      tensor(p + "ffn_gate_exps.weight", {n_embd, n_ff_exp, n_expert},
             T(il % 2 ? GgmlType::Q4_K : GgmlType::Q8_0), 0.0f, s_embd);
      tensor(p + "ffn_up_exps.weight", {n_embd, n_ff_exp, n_expert},
             T(il % 2 ? GgmlType::Q5_K : GgmlType::Q4_K), 0.0f, s_embd);
      tensor(p + "ffn_down_exps.weight", {n_ff_exp, n_embd, n_expert},
             T(il % 2 ? GgmlType::Q6_K : GgmlType::Q8_0), 0.0f, s_exp);
      continue;
    }
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

}  // namespace

}  // namespace mnemo::testing
