// Tiny random-weight models written by our GGUF writer, with realistic tensor names, shapes and
// metadata keys (as llama.cpp's converter writes them), for tests of the forward pass against the
// numpy reference (tests/reference/forward.py) and of the memory modes against each other.
//
// Shapes: n_embd 256, n_ff 512, 4 query heads of 64, 2 KV heads, vocab 512; 2 blocks (gemma3: 6
// blocks, the last one global, sliding window 8). Weight types are mixed on purpose so every
// matmul kernel path runs: q8_0, f16, q4_0, q4_1, q5_0, bf16, q4_K, q5_K, q6_K (all_f32: f32).
#pragma once

#include <cstdint>
#include <string>

#include "mnemo/status.h"

namespace mnemo::testing {

/// Writes a tiny `arch` model ("llama", "qwen2", "qwen3", "gemma3") to `path`, weights drawn
/// from `seed`. Errors: InvalidArgument for an unknown arch, IOError from the writer.
Status write_tiny_model(const std::string& arch, const std::string& path, uint32_t seed,
                        bool all_f32);

}  // namespace mnemo::testing
