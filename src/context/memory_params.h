// The memory a model needs under a context's settings: MemoryParams (src/memory/make_memory.h)
// derived from the model's hyper-parameters and the ContextParams, in one place. Context::create
// hands it to make_memory.
#pragma once

#include <cstdint>

#include "memory/make_memory.h"
#include "mnemo/context.h"
#include "mnemo/model.h"

namespace mnemo {

/// Per layer: K/V row widths n_embd_k_gqa() / n_embd_v_gqa() (head_dim_k x n_head_kv), the window
/// layers (HParams::is_swa_layer) and window, the recurrent layers (HParams::recurrent_layer,
/// given only when the model has a recurrent part) with conv / ssm state sizes n_embd_r() /
/// n_embd_s() floats. Settings from `params`: sequences, unified or split, K/V types and
/// rotation, n_ubatch, swa_full, recurrent checkpoints (rs_checkpoint_interval /
/// rs_n_checkpoints). n_ctx_seq: KV cells per stream (Context::n_ctx_seq). pool: the context's
/// threads (not owned), for requantization.
MemoryParams memory_params(const HParams& hp, const ContextParams& params, uint32_t n_ctx_seq,
                           ThreadPool* pool);

}  // namespace mnemo
