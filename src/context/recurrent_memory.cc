#include "context/recurrent_memory.h"

#include "memory/hybrid_memory.h"
#include "memory/kv_rotation.h"
#include "memory/recurrent_memory.h"

namespace mnemo {

Result<std::unique_ptr<Memory>> make_recurrent_memory(const HParams& hp,
                                                      const ContextParams& params,
                                                      uint32_t n_ctx_seq, ThreadPool* pool) {
  RecurrentMemoryConfig rs;
  rs.n_seq_max = params.n_seq_max;
  rs.n_embd_r.assign(hp.n_layer, hp.n_embd_r());
  rs.n_embd_s.assign(hp.n_layer, hp.n_embd_s());
  rs.layer_filter = [hp](uint32_t il) { return hp.is_recurrent_layer(il); };
  const bool ckpt = params.rs_checkpoint_interval > 0 && params.rs_n_checkpoints > 0;
  rs.checkpoint_interval = ckpt ? params.rs_checkpoint_interval : 0;
  rs.n_checkpoints = ckpt ? params.rs_n_checkpoints : 0;

  bool any_attention = false;
  for (uint32_t il = 0; il < hp.n_layer; ++il) any_attention |= !hp.is_recurrent_layer(il);
  if (!any_attention) {
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<RecurrentMemory> m,
                           RecurrentMemory::create(std::move(rs)));
    return std::unique_ptr<Memory>(std::move(m));
  }
  HybridMemoryConfig c;
  c.rs = std::move(rs);
  c.kv.n_ctx = n_ctx_seq;
  c.kv.n_seq_max = params.n_seq_max;
  c.kv.unified = params.kv_unified;
  c.kv.k_type = params.type_k;
  c.kv.v_type = params.type_v;
  c.kv.n_embd_k_gqa.assign(hp.n_layer, hp.n_embd_k_gqa());
  c.kv.n_embd_v_gqa.assign(hp.n_layer, hp.n_embd_v_gqa());
  // Quantized K/V of the attention layers are rotated as in any other cache (context.cc).
  c.kv.rotation_dim = params.kv_rotation && is_valid_kv_rotation(hp.head_dim_k) ? hp.head_dim_k : 0;
  c.kv.pool = pool;
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<HybridMemory> m, HybridMemory::create(std::move(c)));
  return std::unique_ptr<Memory>(std::move(m));
}

}  // namespace mnemo
