// KvCacheContext: the per-batch transaction of a KvCache (apply / rollback, placement, masks).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "memory/kv_cache.h"
#include "memory/kv_journal.h"

namespace mnemo {

KvCacheContext::KvCacheContext(KvCache* cache, Mode mode, MemoryStatus status, std::string message)
    : PlannedContext(status, std::move(message)),
      cache_(cache),
      mode_(mode),
      journal_(std::make_unique<KvJournal>()) {}

KvCacheContext::~KvCacheContext() = default;

Status KvCacheContext::apply() {
  if (!ok()) return MemoryContext::apply();
  CHECK(!spent_) << "apply() after rollback()";
  switch (mode_) {
    case Mode::kFull:
      return Status();
    case Mode::kUpdate: {
      CHECK(cache_->epoch_ == epoch_) << "the KV cache changed since init_update";
      CHECK(n_applied_ == 0) << "update context applied twice";
      for (const StreamShifts& sh : shifts_) {
        const KvCells& c = cache_->cells_[sh.stream];
        for (uint32_t cell : sh.cells) {
          cache_->journal_set(journal_.get(), sh.stream, cell, c.pos(cell), c.seqs(cell), 0,
                              /*save_rows=*/false);
        }
      }
      n_applied_ = 1;
      epoch_ = ++cache_->epoch_;
      return Status();
    }
    case Mode::kBatch: {
      // The plan was proven on the state this context saw; anything else touching the cache in
      // between is a bug in the decode loop.
      CHECK(cache_->epoch_ == epoch_) << "the KV cache changed since init_batch";
      CHECK(n_applied_ == cur_) << "ubatch " << cur_ << " applied out of order (" << n_applied_
                                << " applied)";
      cache_->apply_placement((*ubatches_)[cur_], placements_[cur_], journal_.get());
      n_applied_ = cur_ + 1;
      epoch_ = ++cache_->epoch_;
      return Status();
    }
  }
  return Status();
}

void KvCacheContext::rollback() {
  if (!ok() || spent_) return;
  spent_ = true;
  if (journal_->empty()) return;
  CHECK(cache_->epoch_ == epoch_) << "the KV cache changed after this context's last apply()";
  cache_->undo(journal_.get());
  ++cache_->epoch_;
}

const KvCacheContext* KvCacheContext::kv_for_layer(uint32_t il) const {
  return cache_->holds_layer(il) ? this : nullptr;
}

const std::vector<StreamSlots>& KvCacheContext::placement() const {
  static const std::vector<StreamSlots> kNone;
  if (mode_ != Mode::kBatch || placements_.empty()) return kNone;
  return placements_[cur_];
}

uint32_t KvCacheContext::n_kv(uint32_t stream) const {
  const uint32_t n_ctx = cache_->n_ctx();
  if (mode_ == Mode::kFull) return n_ctx;
  const uint32_t pad = cache_->config().n_pad;
  const uint64_t padded = (uint64_t{cache_->cells(stream).used_max()} + pad - 1) / pad * pad;
  return static_cast<uint32_t>(std::min<uint64_t>(padded, n_ctx));
}

KvRows KvCacheContext::k_view(uint32_t il, uint32_t stream) const {
  return cache_->k_view(il, stream);
}

KvRows KvCacheContext::v_view(uint32_t il, uint32_t stream) const {
  return cache_->v_view(il, stream);
}

bool KvCacheContext::is_masked(const StreamSlots& slots, uint32_t k, uint32_t cell) const {
  const Ubatch& ub = ubatch();
  const KvCells& c = cache_->cells(slots.stream);
  const uint32_t row = slots.rows[k];
  if (c.is_empty(cell) || !c.seq_has(cell, ub.seq_id(row))) return true;
  const Pos pc = c.pos(cell);
  const Pos p = ub.pos[row];
  const KvCacheConfig& cfg = cache_->config();
  if (cfg.causal && pc > p) return true;
  return is_masked_swa(cfg.swa_type, cfg.n_swa, pc, p);
}

void KvCacheContext::build_mask(size_t i, std::vector<float>* out) const {
  const StreamSlots& slots = placement()[i];
  const uint32_t n_kv = this->n_kv(slots.stream);
  const size_t n_rows = slots.rows.size();
  out->assign(n_rows * n_kv, -INFINITY);
  const Ubatch& ub = ubatch();
  const KvCells& c = cache_->cells(slots.stream);
  const KvCacheConfig& cfg = cache_->config();
  for (size_t k = 0; k < n_rows; ++k) {
    const uint32_t row = slots.rows[k];
    const SeqId s = ub.seq_id(row);
    const Pos p = ub.pos[row];
    float* dst = out->data() + k * n_kv;
    for (uint32_t cell = 0; cell < n_kv; ++cell) {
      if (!c.seq_has(cell, s)) continue;  // also covers empty cells
      const Pos pc = c.pos(cell);
      if ((cfg.causal && pc > p) || is_masked_swa(cfg.swa_type, cfg.n_swa, pc, p)) continue;
      dst[cell] = 0.0f;
    }
  }
}

void KvCacheContext::build_order(size_t i, std::vector<int32_t>* out) const {
  const StreamSlots& slots = placement()[i];
  const uint32_t n_kv = this->n_kv(slots.stream);
  const KvCells& c = cache_->cells(slots.stream);
  out->clear();
  bool sorted = true;
  Pos last = std::numeric_limits<Pos>::min();
  for (uint32_t cell = 0; cell < n_kv; ++cell) {
    if (c.is_empty(cell)) continue;
    sorted = sorted && c.pos(cell) >= last;
    last = c.pos(cell);
    out->push_back(static_cast<int32_t>(cell));
  }
  if (!sorted) {
    std::stable_sort(out->begin(), out->end(),
                     [&](int32_t a, int32_t b) { return c.pos(a) < c.pos(b); });
  }
}

}  // namespace mnemo
