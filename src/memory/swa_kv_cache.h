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
// positions outside the window that the base still holds). A caller that truncates a sequence
// (seq_rm of its tail) to continue at position p can reuse the cache only if p - n_swa >= that
// minimum (the local layers still see the whole window of p); otherwise it must re-decode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "memory/kv_cache.h"
#include "mnemo/memory.h"

namespace mnemo {

class SwaKvCache;

struct SwaKvCacheConfig {
  uint32_t n_ctx = 0;  // cells per stream of the base cache
  uint32_t n_seq_max = 1;
  bool unified = false;
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  std::vector<uint32_t> n_embd_k_gqa;  // [n_layer]
  std::vector<uint32_t> n_embd_v_gqa;  // [n_layer]
  /// Which model layers use the sliding window (required; the others are global).
  std::function<bool(uint32_t il)> is_swa_layer;
  SwaType swa_type = SwaType::kStandard;
  uint32_t n_swa = 0;       // window size, >= 1
  uint32_t n_ubatch = 512;  // the largest n_ubatch init_batch will be called with
  bool swa_full = false;    // give the SWA layers n_ctx cells too
  bool causal = true;
  uint32_t n_pad = 32;
  uint32_t rotation_dim = 0;   // Hadamard rotation of quantized rows (KvCacheConfig::rotation_dim)
  ThreadPool* pool = nullptr;  // requantization's threads (KvCacheConfig::pool)
};

/// The transaction of a SwaKvCache: one child context per KvCache, moved in lockstep.
class SwaKvCacheContext final : public MemoryContext {
 public:
  std::span<const Ubatch> ubatches() const override { return base_->ubatches(); }
  uint32_t ubatch_index() const override { return base_->ubatch_index(); }
  const Ubatch& ubatch() const override { return base_->ubatch(); }
  bool next() override;
  Status apply() override;
  void rollback() override;
  /// base() for global layers, swa() for sliding-window layers.
  const KvCacheContext* kv_for_layer(uint32_t il) const override;

  const KvCacheContext& base() const { return *base_; }
  const KvCacheContext& swa() const { return *swa_; }

 private:
  friend class SwaKvCache;
  SwaKvCacheContext(MemoryStatus status, std::unique_ptr<KvCacheContext> base,
                    std::unique_ptr<KvCacheContext> swa);

  std::unique_ptr<KvCacheContext> base_;
  std::unique_ptr<KvCacheContext> swa_;
};

class SwaKvCache final : public Memory {
 public:
  /// Errors: kInvalidArgument for a config a KvCache would reject, a missing is_swa_layer,
  /// n_swa == 0 or swa_type kNone; kNoSpace when the storage cannot be mapped.
  static Result<std::unique_ptr<SwaKvCache>> create(SwaKvCacheConfig config);
  Result<std::unique_ptr<SwaKvCache>> copy() const;

  // Memory. init_batch also rejects (kInvalidBatch) an n_ubatch larger than config.n_ubatch
  // unless swa_full: the SWA cache is sized for it.
  using Memory::init_batch;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                            const BatchLimits& limits) override;
  std::unique_ptr<MemoryContext> init_full() override;
  std::unique_ptr<MemoryContext> init_update() override;
  Status seq_rm(SeqId seq, Pos p0, Pos p1) override;
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  Status seq_keep(SeqId seq) override;
  Status seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  Status seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) override;
  /// max(base min, swa min): see the header comment.
  Pos seq_pos_min(SeqId seq) const override;
  Pos seq_pos_max(SeqId seq) const override;
  /// keep = p only if the sliding-window layers still hold the whole window a token at p attends
  /// (positions [p - n_swa + 1, p) for a standard window, [(p / n_swa) * n_swa, p) chunked);
  /// otherwise nothing before p can be reused and keep = 0 (the caller re-decodes all p tokens).
  /// With swa_full nothing is ever evicted and keep = min(p, seq_pos_max + 1).
  Result<TruncatePlan> plan_truncate(SeqId seq, Pos p) const override;
  void clear() override;
  /// Both children's tensors and streams, parts "kv_base" and "kv_swa".
  MemoryBreakdown breakdown() const override;
  /// The base child's stream, types, cells and free cells; bytes of both children (see
  /// Memory::seq_info).
  Result<SeqMemoryInfo> seq_info(SeqId seq) const override;
  uint32_t n_seq_max() const override { return config_.n_seq_max; }

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
  SwaKvCache(SwaKvCacheConfig config, std::unique_ptr<KvCache> base, std::unique_ptr<KvCache> swa)
      : config_(std::move(config)), base_(std::move(base)), swa_(std::move(swa)) {}

  SwaKvCacheConfig config_;
  std::unique_ptr<KvCache> base_;
  std::unique_ptr<KvCache> swa_;
};

}  // namespace mnemo
