// HybridMemory: a KvCache and a RecurrentMemory under one transaction. Contract:
// src/memory/hybrid_memory.h.

#include "memory/hybrid_memory.h"

#include <algorithm>
#include <string>
#include <utility>

#include "memory/composite.h"
#include "memory/pos_range.h"

namespace mnemo {

// --- context -----------------------------------------------------------------------------------

const KvCacheContext* HybridMemoryContext::kv_for_layer(uint32_t il) const {
  return kv().cache().holds_layer(il) ? &kv() : nullptr;
}

const RecurrentMemoryContext* HybridMemoryContext::rs_for_layer(uint32_t il) const {
  return rs().state().holds_layer(il) ? &rs() : nullptr;
}

// --- memory ------------------------------------------------------------------------------------

Result<std::unique_ptr<HybridMemory>> HybridMemory::create(HybridMemoryConfig config) {
  const auto bad = [](const std::string& m) {
    return Status::invalid_argument("HybridMemory: " + m);
  };
  if (!config.rs.layer_filter) return bad("rs.layer_filter must say which layers are recurrent");
  if (config.kv.n_seq_max != config.rs.n_seq_max) {
    return bad("the KV cache has n_seq_max " + std::to_string(config.kv.n_seq_max) +
               ", the recurrent state " + std::to_string(config.rs.n_seq_max));
  }
  const size_t n_layer = config.rs.n_embd_r.size();
  if (config.kv.n_embd_k_gqa.size() != n_layer) {
    return bad("the KV cache has " + std::to_string(config.kv.n_embd_k_gqa.size()) +
               " layers, the recurrent state " + std::to_string(n_layer));
  }
  auto is_recurrent = config.rs.layer_filter;
  if (!config.kv.layer_filter) {
    config.kv.layer_filter = [is_recurrent](uint32_t il) { return !is_recurrent(il); };
  }
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (config.kv.layer_filter(il) == is_recurrent(il)) {
      return bad("layer " + std::to_string(il) +
                 " must be either attention (KV cache) or "
                 "recurrent, not both or neither");
    }
  }
  Result<std::unique_ptr<KvCache>> kv = KvCache::create(std::move(config.kv));
  if (!kv.ok()) return kv.status().with_context("HybridMemory attention layers");
  Result<std::unique_ptr<RecurrentMemory>> rs = RecurrentMemory::create(std::move(config.rs));
  if (!rs.ok()) return rs.status().with_context("HybridMemory recurrent layers");
  return std::unique_ptr<HybridMemory>(
      new HybridMemory(std::move(kv).value(), std::move(rs).value()));
}

Result<std::unique_ptr<HybridMemory>> HybridMemory::copy() const {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, kv_->copy());
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<RecurrentMemory> rs, rs_->copy());
  return std::unique_ptr<HybridMemory>(new HybridMemory(std::move(kv), std::move(rs)));
}

std::unique_ptr<MemoryContext> HybridMemory::init_batch(const Batch& batch, uint32_t n_ubatch,
                                                        const BatchLimits& limits) {
  return plan_batch(batch, rs_->batch_limits(kv_->batch_limits(limits)),
                    [&](const PreparedBatch& pb) { return rs_->split(pb, n_ubatch); });
}

std::unique_ptr<MemoryContext> HybridMemory::init_update() {
  // KvCache::init_update always returns a KvCacheContext (kSuccess or kNoUpdate); the recurrent
  // child takes part as a no-op (full-mode) context.
  std::unique_ptr<MemoryContext> kv = kv_->init_update();
  const MemoryStatus st = kv->status();
  return pair(st, rs_->init_full(), std::move(kv));
}

Status HybridMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(composite::check_all(composite::SeqRm{seq, p0, p1}, *rs_, *kv_));
  CHECK(rs_->seq_rm(seq, p0, p1).ok());
  // The recurrent child may have been cut back further (to a checkpoint) or emptied: the KV
  // child is cut to the same end, so both hold the same positions.
  for_each_seq(seq, n_seq_max(), [&](SeqId s) {
    CHECK(kv_->seq_rm(s, p0, p1).ok());
    CHECK(kv_->seq_rm(s, rs_->seq_pos_max(s) + 1, -1).ok());
  });
  return Status();
}

Status HybridMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(rs_->check_seq_cp(src, dst, p0, p1));
  if (src == dst) return Status();
  const uint64_t epoch = rs_->epoch();
  CHECK(rs_->seq_cp(src, dst, p0, p1).ok());
  if (rs_->epoch() == epoch) return Status();  // nothing was copied
  // dst was overwritten with src's state up to its new end: give the KV child the same cells.
  // After dst's cells are removed, a split cache's stream of dst is empty, so the copy fits.
  CHECK(kv_->seq_rm(dst, -1, -1).ok());
  const Status st = kv_->seq_cp(src, dst, rs_->seq_pos_min(dst), rs_->seq_pos_max(dst) + 1);
  CHECK(st.ok()) << st.to_string();
  return Status();
}

Pos HybridMemory::seq_pos_max(SeqId seq) const {
  const Pos p = rs_->seq_pos_max(seq);
  DCHECK(p == kv_->seq_pos_max(seq)) << "hybrid children disagree on seq " << seq;
  return p;
}

Result<TruncatePlan> HybridMemory::plan_truncate(SeqId seq, Pos p) const {
  return rs_->plan_truncate(seq, p);
}

MemoryBreakdown HybridMemory::breakdown() const {
  MemoryBreakdown out = kv_->breakdown();
  composite::append_breakdown(out, rs_->breakdown());
  return out;
}

Result<SeqMemoryInfo> HybridMemory::seq_info(SeqId seq) const {
  return composite::seq_info_of(*kv_, *rs_, seq);
}

}  // namespace mnemo
