// Tiny random-weight models written by our GGUF writer, with realistic tensor names, shapes and
// metadata keys (as llama.cpp's converter writes them), for tests of the forward pass against the
// numpy reference (tests/reference/forward.py) and of the memory modes against each other.
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

/// Writes a tiny `arch` model ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3") to `path`, weights
/// drawn from `seed`. Errors: InvalidArgument for an unknown arch, IOError from the writer.
Status write_tiny_model(const std::string& arch, const std::string& path, uint32_t seed,
                        bool all_f32);

/// qwen3moe with the shapes of Qwen3-30B-A3B (n_embd 2048, 32 query heads and 4 KV heads of
/// 128, 128 experts of width 768, 8 per token) but `n_layer` blocks and a 512-token vocabulary:
/// random weights (experts q4_K / q6_K, as a Q4_K_M file) for speed comparisons with llama.cpp
/// (docs/benchmarks.md). About 340 MB per block.
Status write_moe_bench_model(const std::string& path, uint32_t seed, int64_t n_layer);

/// The tokenizer.ggml.* keys of a SentencePiece-style vocabulary (tokenizer.ggml.model "llama")
/// of n_vocab pieces, so that tools which need a tokenizer (mnemo serve, llama.cpp) load a tiny
/// file: <unk>, <s>, </s>, the 256 byte-fallback pieces, then "▁x" and "x" for printable ASCII
/// characters x, then <extra_k> fillers. In the order they are written.
std::vector<std::pair<std::string, gguf::Value>> tiny_spm_vocab(int64_t n_vocab);

/// n_rows rows of n_in weights of K-quant type `t` (q4_K, q5_K, q6_K): random quants and
/// sub-block scales with super-scales of about 1 / sqrt(n_in), drawn from `seed` (our writer has
/// no K-quant quantizer).
std::vector<uint8_t> random_kquant_weights(GgmlType t, int64_t n_rows, int64_t n_in,
                                           uint32_t seed);

}  // namespace mnemo::testing
