// SwaKvCache: the memory of interleaved sliding-window models (Gemma 3: five local layers per
// global layer), composed of two KvCaches behind the Memory interface (docs/design.md §3.3):
//
//   base  the full-attention (global) layers: n_ctx cells per stream, nothing ever evicted;
//   swa   the sliding-window (local) layers: n_swa + n_ubatch cells per stream in split mode,
//         n_swa * n_seq_max + n_ubatch in unified mode (rounded up to n_pad, at most n_ctx). Its
//         find_slot reuses cells that fell out of every owner's window instead of pruning them,
//         so a few positions behind the window usually survive (short rollbacks stay possible).
//         With swa_full the SWA layers get n_ctx cells as well (same placement as the base).
//
// One transaction over both: init_batch validates and splits once, plans the base and then the
// SWA cache, and returns a context only if both fit (either failing changes nothing); the
// context applies and rolls back both. Sequence operations are checked on both children before
// either changes, then done on both.
//
// seq_pos_max is the same in both children. seq_pos_min returns the lowest position that every
// layer still holds: the larger of the two children's minimums (the SWA child may have evicted
// positions outside the window that the base still holds; both children hold a sequence or
// neither, as the SWA child never evicts a sequence's last cell). A caller that truncates a
// sequence (seq_rm of its tail) to continue at position p can reuse the cache only if p - n_swa >=
// that minimum (the local layers still see the whole window of p); otherwise it must re-decode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "memory/composite.h"
#include "memory/kv_cache.h"
#include "mnemo/memory.h"

namespace mnemo {

class SwaKvCache;

struct SwaKvCacheConfig {
  /// What both children share, as for one KvCache: n_ctx (cells per stream of the base cache),
  /// n_seq_max, unified, K/V types, row widths of every model layer, causal, n_pad, rotation,
  /// pool. swa_type and n_swa are the window of the sliding-window layers (required: a window
  /// type other than kNone and n_swa >= 1; the base child has none). layer_filter must be null
  /// (is_swa_layer splits the layers) and swa_reuse is set per child (from swa_full).
  KvCacheConfig kv;
  /// Which model layers use the sliding window (required; the others are global).
  std::function<bool(uint32_t il)> is_swa_layer;
  uint32_t n_ubatch = 512;  // the largest n_ubatch init_batch will be called with
  bool swa_full = false;    // give the SWA layers n_ctx cells too
};

/// The transaction of a SwaKvCache: one child context per KvCache, moved in lockstep; apply()
/// commits the base child's part of a ubatch then the SWA child's, rollback() the reverse.
class SwaKvCacheContext final : public composite::PairContext<KvCacheContext, KvCacheContext> {
 public:
  /// base() for global layers, swa() for sliding-window layers.
  const KvCacheContext* kv_for_layer(uint32_t il) const override;

  const KvCacheContext& base() const { return *first_; }
  const KvCacheContext& swa() const { return *second_; }

 private:
  friend class SwaKvCache;
  friend class composite::CompositeMemory<SwaKvCache>;
  SwaKvCacheContext(MemoryStatus status, std::unique_ptr<KvCacheContext> base,
                    std::unique_ptr<KvCacheContext> swa)
      : PairContext(status, std::move(base), std::move(swa), Order::kFirstThenSecond) {}
};

class SwaKvCache final : public composite::CompositeMemory<SwaKvCache> {
 public:
  /// Errors: kInvalidArgument for a config a KvCache would reject, a missing is_swa_layer, a
  /// kv.layer_filter, n_swa == 0 or swa_type kNone; kNoSpace when the storage cannot be mapped.
  static Result<std::unique_ptr<SwaKvCache>> create(SwaKvCacheConfig config);
  Result<std::unique_ptr<SwaKvCache>> copy() const;

  // Memory. init_batch also rejects (kInvalidBatch) an n_ubatch larger than config.n_ubatch
  // unless swa_full: the SWA cache is sized for it.
  using Memory::init_batch;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                            const BatchLimits& limits) override;
  // init_full: CompositeMemory.
  std::unique_ptr<MemoryContext> init_update() override;
  Status seq_rm(SeqId seq, Pos p0, Pos p1) override;
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  // seq_keep, seq_add, seq_div, seq_pos_min (max(base min, swa min): see the header comment),
  // clear: CompositeMemory.
  Pos seq_pos_max(SeqId seq) const override;
  /// keep = p only if the sliding-window layers still hold the whole window a token at p attends
  /// (positions [p - n_swa + 1, p) for a standard window, [(p / n_swa) * n_swa, p) chunked);
  /// otherwise nothing before p can be reused and keep = 0 (the caller re-decodes all p tokens).
  /// With swa_full nothing is ever evicted and keep = min(p, seq_pos_max + 1).
  Result<TruncatePlan> plan_truncate(SeqId seq, Pos p) const override;
  /// Both children's tensors and streams, parts "kv_base" and "kv_swa".
  MemoryBreakdown breakdown() const override;
  /// The base child's stream, types, cells and free cells; bytes of both children (see
  /// Memory::seq_info).
  Result<SeqMemoryInfo> seq_info(SeqId seq) const override;
  /// Both children's answer: isolated in each (split mode).
  bool seq_isolated(SeqId seq) const override {
    return base_->seq_isolated(seq) && swa_->seq_isolated(seq);
  }
  // n_seq_max: CompositeMemory.

  // State (swa_kv_cache_io.cc): parts kv_base then kv_swa, both validated before either is
  // applied; the SWA part holds every cell the window child holds (also the ones behind the
  // window not reused yet), so a restored sequence continues exactly. Requantization converts
  // both children (requantize_seq: the sequence's stream in each; checked on both first).
  state_format::MemoryKindId state_kind() const override {
    return state_format::MemoryKindId::kSwa;
  }
  Status state_write(StateWriter& w, const StateWriteSpec& spec) const override;
  Status state_read(StateReader& r, const StateReadSpec& spec) override;
  Status requantize(GgmlType k_type, GgmlType v_type) override;
  Status requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) override;

  const SwaKvCacheConfig& config() const { return config_; }
  const KvCache& base() const { return *base_; }
  const KvCache& swa() const { return *swa_; }
  KvCache& base() { return *base_; }
  KvCache& swa() { return *swa_; }

 private:
  // CompositeMemory's hooks: the children in the order sequence operations check and apply
  // them and batches are planned, the transaction, the layers each child holds.
  friend class composite::CompositeMemory<SwaKvCache>;
  KvCache& first() const { return *base_; }
  KvCache& second() const { return *swa_; }
  using Context = SwaKvCacheContext;
  static constexpr const char* kFirstLayers = "full-attention layers";
  static constexpr const char* kSecondLayers = "sliding-window layers";

  SwaKvCache(SwaKvCacheConfig config, std::unique_ptr<KvCache> base, std::unique_ptr<KvCache> swa)
      : config_(std::move(config)), base_(std::move(base)), swa_(std::move(swa)) {}

  SwaKvCacheConfig config_;
  std::unique_ptr<KvCache> base_;
  std::unique_ptr<KvCache> swa_;
};

}  // namespace mnemo
