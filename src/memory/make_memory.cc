// make_memory: the one place a memory's configuration is filled in from MemoryParams. Contract:
// src/memory/make_memory.h.
#include "memory/make_memory.h"

#include <algorithm>
#include <utility>

#include "memory/hybrid_memory.h"
#include "memory/kv_cache.h"
#include "memory/kv_rotation.h"
#include "memory/recurrent_memory.h"
#include "memory/swa_kv_cache.h"

namespace mnemo {
namespace {

// A layer predicate over [n_layer] flags (a layer past the end is not flagged).
std::function<bool(uint32_t)> flagged(std::vector<uint8_t> flags) {
  return [flags = std::move(flags)](uint32_t il) { return il < flags.size() && flags[il] != 0; };
}

// The K/V cache settings every kind shares (the SWA child and the hybrid's attention child
// start from these too).
KvCacheConfig kv_config(const MemoryParams& p) {
  KvCacheConfig c(p.kv);
  // Quantized rows are rotated per head, when the head size is a power of two.
  c.rotation_dim = p.kv_rotation && is_valid_kv_rotation(p.head_dim) ? p.head_dim : 0;
  c.pool = p.pool;
  return c;
}

RecurrentMemoryConfig rs_config(const MemoryParams& p) {
  RecurrentMemoryConfig c;
  c.n_seq_max = p.kv.n_seq_max;
  c.n_embd_r = p.n_embd_r;
  c.n_embd_s = p.n_embd_s;
  c.layer_filter = flagged(p.recurrent_layer);
  const bool ckpt = p.checkpoint_interval > 0 && p.n_checkpoints > 0;
  c.checkpoint_interval = ckpt ? p.checkpoint_interval : 0;
  c.n_checkpoints = ckpt ? p.n_checkpoints : 0;
  c.n_spec = p.n_spec;
  return c;
}

template <class M>
Result<std::unique_ptr<Memory>> as_memory(Result<std::unique_ptr<M>> m) {
  if (!m.ok()) return m.status();
  return std::unique_ptr<Memory>(std::move(m).value());
}

// A RecurrentMemory when every layer is recurrent, else a HybridMemory.
Result<std::unique_ptr<Memory>> make_recurrent(const MemoryParams& p) {
  if (std::any_of(p.swa_layer.begin(), p.swa_layer.end(), [](uint8_t f) { return f != 0; }) &&
      p.swa_type != SwaType::kNone && p.n_swa > 0) {
    return Status::not_supported("recurrent layers together with sliding-window layers");
  }
  const bool all_recurrent = std::all_of(p.recurrent_layer.begin(), p.recurrent_layer.end(),
                                         [](uint8_t f) { return f != 0; });
  if (all_recurrent) return as_memory(RecurrentMemory::create(rs_config(p)));
  HybridMemoryConfig c;
  c.kv = kv_config(p);
  c.rs = rs_config(p);
  return as_memory(HybridMemory::create(std::move(c)));
}

}  // namespace

Result<std::unique_ptr<Memory>> make_memory(const MemoryParams& p) {
  if (!p.recurrent_layer.empty()) return make_recurrent(p);
  if (p.swa_type != SwaType::kNone && p.n_swa > 0) {
    SwaKvCacheConfig c;
    c.kv = kv_config(p);
    c.kv.swa_type = p.swa_type;
    c.kv.n_swa = p.n_swa;
    c.is_swa_layer = flagged(p.swa_layer);
    c.n_ubatch = p.n_ubatch;
    c.swa_full = p.swa_full;
    return as_memory(SwaKvCache::create(std::move(c)));
  }
  return as_memory(KvCache::create(kv_config(p)));
}

}  // namespace mnemo
