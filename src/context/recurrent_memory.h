// The memory of models with recurrent layers, built from the model's hyper-parameters
// and the context's settings: a RecurrentMemory when every layer is recurrent (mamba2), a
// HybridMemory (KvCache for attention layers + RecurrentMemory) otherwise (granitehybrid).
// pool: the context's threads, used by the KvCache to requantize (KvCacheConfig::pool).
#pragma once

#include <cstdint>
#include <memory>

#include "mnemo/context.h"
#include "mnemo/memory.h"
#include "mnemo/model.h"

namespace mnemo {

/// Per recurrent layer and sequence: conv state (d_conv - 1) * (d_inner + 2 n_group d_state)
/// floats, ssm state d_state * d_inner floats (HParams::n_embd_r / n_embd_s). n_ctx_seq: KV cells
/// per stream of the attention layers. Checkpoints from params.rs_checkpoint_interval /
/// rs_n_checkpoints (none when either is 0). Quantized K/V of the attention layers get the
/// Hadamard rotation when params.kv_rotation is set and the head size is a power of two, as in
/// every other cache. Errors: those of RecurrentMemory /
/// HybridMemory::create.
Result<std::unique_ptr<Memory>> make_recurrent_memory(const HParams& hp,
                                                      const ContextParams& params,
                                                      uint32_t n_ctx_seq, ThreadPool* pool);

}  // namespace mnemo
