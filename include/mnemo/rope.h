// The RoPE variants a model's hyper-parameters name (HParams::rope_mode); the rotation itself is a
// kernel (src/kernels/kernels.h: RopeParams, rope_table, rope_inplace, rope_shift).
#pragma once

namespace mnemo::kernels {

/// Which dimensions form the rotated pairs (ggml's names). Rotary position embedding: Su et al.
/// 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding".
enum class RopeMode {
  kNormal,  // pairs (2i, 2i+1): Llama / SmolLM ("rope type norm" in ggml)
  kNeox,    // pairs (i, i + n_dims/2): GPT-NeoX, Gemma, Qwen
};

}  // namespace mnemo::kernels
