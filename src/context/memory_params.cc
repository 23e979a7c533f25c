#include "context/memory_params.h"

namespace mnemo {

MemoryParams memory_params(const HParams& hp, const ContextParams& params, uint32_t n_ctx_seq,
                           ThreadPool* pool) {
  MemoryParams p;
  p.kv.n_embd_k_gqa.assign(hp.n_layer, hp.n_embd_k_gqa());
  p.kv.n_embd_v_gqa.assign(hp.n_layer, hp.n_embd_v_gqa());
  p.kv.head_dim_v = hp.head_dim_v;
  p.head_dim = hp.head_dim_k;
  p.swa_type = hp.swa_type;
  p.n_swa = hp.n_swa;
  p.swa_layer.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) p.swa_layer[il] = hp.is_swa_layer(il) ? 1 : 0;
  if (hp.has_recurrent_layers()) {
    p.recurrent_layer.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      p.recurrent_layer[il] = hp.is_recurrent_layer(il) ? 1 : 0;
    }
    p.n_embd_r.assign(hp.n_layer, hp.n_embd_r());
    p.n_embd_s.assign(hp.n_layer, hp.n_embd_s());
  }
  p.kv.n_ctx = n_ctx_seq;
  p.kv.n_seq_max = params.n_seq_max;
  p.kv.unified = params.kv_unified;
  p.kv.k_type = params.type_k;
  p.kv.v_type = params.type_v;
  p.kv_rotation = params.kv_rotation;
  p.n_ubatch = params.n_ubatch;
  p.swa_full = params.swa_full;
  p.checkpoint_interval = params.rs_checkpoint_interval;
  p.n_checkpoints = params.rs_n_checkpoints;
  p.n_spec = params.rs_n_spec;
  p.pool = pool;
  return p;
}

}  // namespace mnemo
