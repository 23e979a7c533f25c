// make_memory: every kind of memory (docs/design.md §3) built from one description, MemoryParams:
// what each model layer keeps and the context's settings. The memory does not know the model
// (nothing in src/memory includes a model header): the context derives MemoryParams from the
// model's hyper-parameters (src/context/memory_params.h) and calls make_memory.
//
// The kind follows the layers:
//   recurrent_layer given (the model has a recurrent part)
//     every layer recurrent                  RecurrentMemory            (mamba2)
//     otherwise                              HybridMemory: a KvCache for the attention layers
//                                            and a RecurrentMemory      (granitehybrid, qwen35)
//   a window (swa_type != kNone, n_swa > 0)  SwaKvCache: swa_layer picks the window layers
//                                                                       (gemma3)
//   otherwise                                KvCache                    (llama, qwen2/3, ...)
// Every K/V cache among them is configured in one place (make_memory.cc), with the same rotation
// rule: Hadamard rotation of quantized rows by the head size when kv_rotation is on and the head
// size is a power of two (kv_rotation.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "memory/kv_cache.h"
#include "mnemo/memory.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"
#include "mnemo/swa.h"
#include "mnemo/thread_pool.h"

namespace mnemo {

/// What a memory holds and how: the model's layers (from its hyper-parameters) and the
/// context's settings (from ContextParams). Plain data; copyable.
struct MemoryParams {
  /// What every K/V cache among the memory's children holds: the model's K / V row widths per
  /// layer (n_embd_k_gqa, n_embd_v_gqa) and the context's cells per stream (n_ctx; split mode:
  /// the context's n_ctx / n_seq_max), sequences [0, n_seq_max) (those of the recurrent state
  /// too), one KV stream for all sequences (unified) or one per sequence, and K/V types.
  KvCacheShape kv;

  // --- the model's layers -----------------------------------------------------------------------
  /// Attention head size (of K): the block of the Hadamard rotation when kv_rotation is on.
  uint32_t head_dim = 0;
  /// [n_layer] 1: the layer attends through the sliding window (SwaKvCache's window child).
  /// Empty: no layer does. Used only when the model has a window (swa_type, n_swa).
  std::vector<uint8_t> swa_layer;
  SwaType swa_type = SwaType::kNone;  // the window's mask (swa.h); kNone: no window
  uint32_t n_swa = 0;                 // window size
  /// [n_layer] 1: the layer is recurrent (conv + ssm state per sequence). Empty: the model has
  /// no recurrent part. Given, it makes the memory a RecurrentMemory or a HybridMemory.
  std::vector<uint8_t> recurrent_layer;
  std::vector<uint32_t> n_embd_r;  // [n_layer] conv state floats per sequence (recurrent layers)
  std::vector<uint32_t> n_embd_s;  // [n_layer] ssm state floats per sequence (recurrent layers)

  // --- the context's settings -------------------------------------------------------------------
  bool kv_rotation = true;  // rotate quantized K/V rows (see the header comment)
  uint32_t n_ubatch = 512;  // the largest ubatch (sizes the sliding-window cache)
  bool swa_full = false;    // give the window layers as many cells as the others
  /// Recurrent checkpoints: a snapshot every checkpoint_interval positions, n_checkpoints kept
  /// per sequence (either 0: none).
  uint32_t checkpoint_interval = 0;
  uint32_t n_checkpoints = 0;
  /// Recurrent speculative states kept per sequence (RecurrentMemoryConfig::n_spec; 0: none).
  uint32_t n_spec = 0;
  /// Threads for whole-stream requantization (not owned; must outlive the memory). May be null.
  ThreadPool* pool = nullptr;
};

/// The memory `p` describes (kinds in the header comment). Errors: those of KvCache::create,
/// SwaKvCache::create, RecurrentMemory::create and HybridMemory::create (kInvalidArgument for
/// inconsistent widths or layers, kNoSpace when the storage cannot be mapped); kNotSupported for
/// recurrent layers together with window layers.
Result<std::unique_ptr<Memory>> make_memory(const MemoryParams& p);

}  // namespace mnemo
