// The recurrent and hybrid architectures of write_tiny_model (tiny_model.h), which dispatches to
// these writers: tiny_ssm_model.cc describes the mamba2 / granitehybrid files. Call
// write_tiny_model rather than these.
#pragma once

#include <string>

#include "mnemo/status.h"
#include "support/tiny_model.h"

namespace mnemo::testing {

/// mamba2 / granitehybrid (`arch`) to `path`, from options.seed, options.all_f32 and
/// options.rope (granitehybrid only). Errors: IOError from the writer.
Status write_tiny_ssm_model(const std::string& arch, const std::string& path,
                            const TinyModelOptions& options);

/// qwen35 / qwen35moe / qwen35-bench / qwen35moe-bench (`arch`) to `path`, from options.seed,
/// options.all_f32 and options.n_layer (the bench shapes), with llama.cpp's tensor names and keys
/// (src/model/model_qwen35.cc lists them):
///   qwen35     4 blocks (full_attention_interval 4: Gated DeltaNet x 3, then gated attention),
///              n_embd 256, Gated DeltaNet with 2 key heads and 4 value heads of 32 (value head h
///              reads key head h % 2), d_conv 4; attention 4 query heads of 64, 2 KV heads, RoPE
///              on 16 dims (a quarter, as Qwen3.5); SwiGLU n_ff 512; output tied to token_embd;
///              vocab 512. Weight types mixed (q8_0, f16, bf16, q5_0, q4_0, q5_1, q4_K, q5_K,
///              q6_K), or all f32 with --f32.
///   qwen35moe  the same with 8 experts of width 128 (2 per token; q4_0 / q5_0 / q8_0) and a
///              shared expert of 256 (q4_1 / q5_1 / q8_0), an untied output matrix.
///   qwen35-bench  Qwen3.5-0.8B's shapes (n_embd 1024, 24 blocks, 8 query heads and 2 KV heads
///              of 256, 16 + 16 Gated DeltaNet heads of 128, n_ff 3584, vocab 248320), Q4_K_M-like
///              types, random weights: for speed comparisons with llama.cpp.
///   qwen35moe-bench  Qwen3.5-35B-A3B's shapes (n_embd 2048, 16 query / 2 KV heads of 256,
///              16 key and 32 value heads of 128, 256 experts of width 512, 8 per token, a shared
///              expert of 512, vocab 248320) with 4 blocks by default (--layers N).
/// Random K-quant blocks stand for q4_K / q5_K / q6_K weights (tiny_model.h).
/// Errors: IOError from the writer.
Status write_tiny_qwen35_model(const std::string& arch, const std::string& path,
                               const TinyModelOptions& options);

}  // namespace mnemo::testing
