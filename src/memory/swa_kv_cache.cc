#include "memory/swa_kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

#include "memory/composite.h"

namespace mnemo {

// --- context -----------------------------------------------------------------------------------

const KvCacheContext* SwaKvCacheContext::kv_for_layer(uint32_t il) const {
  if (base().cache().holds_layer(il)) return &base();
  if (swa().cache().holds_layer(il)) return &swa();
  return nullptr;
}

// --- cache -------------------------------------------------------------------------------------

Result<std::unique_ptr<SwaKvCache>> SwaKvCache::create(SwaKvCacheConfig config) {
  if (!config.is_swa_layer) {
    return Status::invalid_argument("SwaKvCache: is_swa_layer must say which layers are local");
  }
  if (config.kv.layer_filter) {
    return Status::invalid_argument(
        "SwaKvCache: kv.layer_filter must be unset (is_swa_layer splits the layers)");
  }
  if (config.kv.swa_type == SwaType::kNone || config.kv.n_swa == 0) {
    return Status::invalid_argument(
        "SwaKvCache: needs a window (swa_type standard or chunked, "
        "n_swa >= 1)");
  }
  if (config.n_ubatch == 0) return Status::invalid_argument("SwaKvCache: n_ubatch must be >= 1");

  const KvCacheConfig& kv = config.kv;
  KvCacheConfig base = kv;
  base.swa_type = SwaType::kNone;
  base.n_swa = 0;
  base.swa_reuse = true;
  KvCacheConfig swa = kv;

  auto is_swa = config.is_swa_layer;
  base.layer_filter = [is_swa](uint32_t il) { return !is_swa(il); };
  swa.layer_filter = is_swa;
  swa.swa_reuse = !config.swa_full;
  if (!config.swa_full && kv.n_pad > 0) {
    // Every sequence of a stream keeps at most n_swa - 1 unmasked cells besides a ubatch.
    const uint64_t per_stream =
        uint64_t{kv.n_swa} * (kv.unified ? kv.n_seq_max : 1) + config.n_ubatch;
    const uint64_t padded = (per_stream + kv.n_pad - 1) / kv.n_pad * kv.n_pad;
    swa.n_ctx = static_cast<uint32_t>(std::min<uint64_t>(padded, kv.n_ctx));
  }
  Result<std::unique_ptr<KvCache>> b = KvCache::create(std::move(base));
  if (!b.ok()) return b.status().with_context("SwaKvCache base");
  Result<std::unique_ptr<KvCache>> s = KvCache::create(std::move(swa));
  if (!s.ok()) return s.status().with_context("SwaKvCache swa");
  return std::unique_ptr<SwaKvCache>(
      new SwaKvCache(std::move(config), std::move(b).value(), std::move(s).value()));
}

Result<std::unique_ptr<SwaKvCache>> SwaKvCache::copy() const {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> b, base_->copy());
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> s, swa_->copy());
  return std::unique_ptr<SwaKvCache>(new SwaKvCache(config_, std::move(b), std::move(s)));
}

std::unique_ptr<MemoryContext> SwaKvCache::init_batch(const Batch& batch, uint32_t n_ubatch,
                                                      const BatchLimits& limits) {
  if (!config_.swa_full && n_ubatch > config_.n_ubatch) {
    return std::make_unique<MemoryContext>(
        MemoryStatus::kInvalidBatch,
        "n_ubatch " + std::to_string(n_ubatch) + " exceeds the n_ubatch " +
            std::to_string(config_.n_ubatch) + " this SwaKvCache was sized for");
  }
  return plan_batch(batch, base_->batch_limits(limits), [&](const PreparedBatch& pb) {
    return split_batch(pb, base_->split_strategy(), n_ubatch);
  });
}

std::unique_ptr<MemoryContext> SwaKvCache::init_update() {
  // KvCache::init_update always returns a KvCacheContext (kSuccess or kNoUpdate).
  std::unique_ptr<MemoryContext> b = base_->init_update();
  std::unique_ptr<MemoryContext> s = swa_->init_update();
  const MemoryStatus st = (b->ok() || s->ok()) ? MemoryStatus::kSuccess : MemoryStatus::kNoUpdate;
  return pair(st, std::move(b), std::move(s));
}

Status SwaKvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  return composite::seq_op_all(composite::SeqRm{seq, p0, p1}, *base_, *swa_);
}

Status SwaKvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  // The window child has fewer cells: a copy that does not fit says which layers refused.
  return composite::seq_op_all(composite::SeqCp{src, dst, p0, p1}, *base_,
                               composite::Named{*swa_, "sliding-window layers"});
}

Pos SwaKvCache::seq_pos_max(SeqId seq) const { return base_->seq_pos_max(seq); }

MemoryBreakdown SwaKvCache::breakdown() const {
  const auto labeled = [](MemoryBreakdown b, const char* part) {
    for (auto& t : b.tensors) t.part = part;
    for (auto& st : b.streams) st.part = part;
    return b;
  };
  MemoryBreakdown out = labeled(base_->breakdown(), "kv_base");
  composite::append_breakdown(out, labeled(swa_->breakdown(), "kv_swa"));
  return out;
}

Result<SeqMemoryInfo> SwaKvCache::seq_info(SeqId seq) const {
  // The base child holds every position, so its cells bound what the sequence can hold; the
  // SWA child's bytes serve the sequence too.
  return composite::seq_info_of(*base_, *swa_, seq);
}

Result<TruncatePlan> SwaKvCache::plan_truncate(SeqId seq, Pos p) const {
  auto plan = Memory::plan_truncate(seq, p);  // validates; keep = min(p, end)
  if (!plan.ok() || plan->keep == 0 || config_.swa_full) return plan;
  const Pos keep = plan->keep;
  const Pos n_swa = static_cast<Pos>(config_.kv.n_swa);
  // Oldest position a token at `keep` attends in the local layers; all of [window_start, keep)
  // must still be held by the SWA child, which holds a gap-free range [its seq_pos_min, end].
  const Pos window_start = config_.kv.swa_type == SwaType::kChunked
                               ? (keep / n_swa) * n_swa
                               : std::max<Pos>(0, keep - n_swa + 1);
  if (window_start < keep && swa_->seq_pos_min(seq) > window_start) {
    return TruncatePlan{0, static_cast<uint32_t>(p)};
  }
  return plan;
}

}  // namespace mnemo
