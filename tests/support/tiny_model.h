// Tiny random-weight models written by our GGUF writer (library mnemo_tiny_models, linked by the
// C++ tests, the fuzzers and tests/tools/make_tiny_model, which the Python tests run), with
// realistic tensor names, shapes and metadata keys (as llama.cpp's converter writes them), for
// tests of the forward pass against the numpy reference (tests/reference/forward.py) and
// llama.cpp, and of the memory modes against each other.
//
// Shapes: n_embd 256, n_ff 512, 4 query heads of 64, 2 KV heads, vocab 512; 2 blocks (gemma3: 6
// blocks, the last one global, sliding window 8; qwen3moe: 8 experts of width 256, 2 per token,
// instead of the dense feed-forward). Weight types are mixed on purpose so every
// matmul kernel path runs: q8_0, f16, q4_0, q4_1, q5_0, bf16, q4_K, q5_K, q6_K (all_f32: f32).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"

namespace mnemo::testing {

/// What make_tiny_model's flags set; every field has the default the flag's absence means.
struct TinyModelOptions {
  uint32_t seed = 1;     // --seed N: the weights' random stream
  bool all_f32 = false;  // --f32: every matrix in f32 (not for the *-bench shapes)
  bool rope = false;     // --rope: granitehybrid with RoPE in its attention layer (Bamba's layout)
  int64_t n_layer = 0;   // --layers N: blocks of qwen35* and qwen3moe-bench; <= 0: the default
};

/// Writes a tiny random-weight model of `arch` to `path`: the one way tests, tools
/// (make_tiny_model) and fuzzers (fuzz_model) make model files.
///   llama, qwen2, qwen3, qwen3moe, gemma3  the shapes above;
///   mamba2, granitehybrid, qwen35, qwen35moe  recurrent and hybrid ones (tiny_ssm_model.h);
///   qwen3moe-bench  Qwen3-30B-A3B's shapes (n_embd 2048, 32 query heads and 4 KV heads of 128,
///                   128 experts of width 768, 8 per token) with n_layer blocks (default 2) and
///                   a 512-token vocabulary, experts q4_K / q6_K as a Q4_K_M file, about 340 MB
///                   per block: for speed comparisons with llama.cpp (docs/benchmarks.md);
///   qwen35-bench, qwen35moe-bench  Qwen3.5's shapes (tiny_ssm_model.h).
/// The same arch and options give the same bytes (fixtures record their SHA-256).
/// Errors: InvalidArgument for an unknown arch, IOError from the writer.
Status write_tiny_model(const std::string& arch, const std::string& path,
                        const TinyModelOptions& options = {});

/// The tokenizer.ggml.* keys of a SentencePiece-style vocabulary (tokenizer.ggml.model "llama")
/// of n_vocab pieces, so that tools which need a tokenizer (mnemo serve, llama.cpp) load a tiny
/// file: <unk>, <s>, </s>, the 256 byte-fallback pieces, then "▁x" and "x" for printable ASCII
/// characters x, then <extra_k> fillers. In the order they are written.
std::vector<std::pair<std::string, gguf::Value>> tiny_spm_vocab(int64_t n_vocab);

/// n_rows rows of n_in weights of K-quant type `t` (q4_K, q5_K, q6_K): random quants and
/// sub-block scales with super-scales of about 1 / sqrt(n_in), drawn from `seed` (our writer has
/// no K-quant quantizer).
std::vector<uint8_t> random_kquant_weights(GgmlType t, int64_t n_rows, int64_t n_in, uint32_t seed);

}  // namespace mnemo::testing
