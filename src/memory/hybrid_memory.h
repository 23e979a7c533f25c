// HybridMemory: the memory of models that mix attention and recurrent layers (Granite 4.0-H,
// Bamba, ...; docs/design.md §3.5), composed of a KvCache for the attention layers and a
// RecurrentMemory for the recurrent layers behind the Memory interface.
//
// One transaction over both: init_batch validates once (one sequence per row, as the recurrent
// state needs), splits once with the recurrent split (split_seq, cut at checkpoint boundaries;
// every such ubatch is also a valid ubatch for the KV cache in unified or split mode), prepares
// the recurrent context and plans the KV placement, and returns a context only if both succeed
// (nothing changes otherwise). The context applies KV then recurrent state for each ubatch and
// rolls back both (recurrent first), so after rollback() both children are byte-equal to their
// state before init_batch.
//
// Sequence operations are checked on both children before either changes, then done on both.
// seq_rm of a tail follows the recurrent child: the KV child is cut at the same point, so both
// hold the same positions (plan_truncate is the recurrent child's answer). seq_pos_max is the
// same in both children; seq_pos_min is the larger of the two minimums.
//
// Lifetime: created by HybridMemory::create as a std::unique_ptr; neither copyable nor movable;
// copy() deep-copies. Single-threaded (the server loop owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "memory/composite.h"
#include "memory/kv_cache.h"
#include "memory/recurrent_memory.h"
#include "mnemo/memory.h"

namespace mnemo {

class HybridMemory;

struct HybridMemoryConfig {
  /// The attention layers' cache. Its layer_filter must select exactly the layers that `rs`
  /// does not hold (create() fills it in when null).
  KvCacheConfig kv;
  /// The recurrent layers' state (layer_filter: the recurrent layers; required).
  RecurrentMemoryConfig rs;
};

/// The transaction of a HybridMemory: a recurrent context and a KV context moved in lockstep;
/// apply() commits the KV part of a ubatch then the recurrent part, rollback() the recurrent part
/// first.
class HybridMemoryContext final
    : public composite::PairContext<RecurrentMemoryContext, KvCacheContext> {
 public:
  /// kv() for attention layers, nullptr for recurrent ones.
  const KvCacheContext* kv_for_layer(uint32_t il) const override;
  /// rs() for recurrent layers, nullptr for attention ones.
  const RecurrentMemoryContext* rs_for_layer(uint32_t il) const override;

  const KvCacheContext& kv() const { return *second_; }
  const RecurrentMemoryContext& rs() const { return *first_; }

 private:
  friend class HybridMemory;
  friend class composite::CompositeMemory<HybridMemory>;
  HybridMemoryContext(MemoryStatus status, std::unique_ptr<RecurrentMemoryContext> rs,
                      std::unique_ptr<KvCacheContext> kv)
      : PairContext(status, std::move(rs), std::move(kv), Order::kSecondThenFirst) {}
};

class HybridMemory final : public composite::CompositeMemory<HybridMemory> {
 public:
  /// Errors: kInvalidArgument for a config either child rejects, a missing rs.layer_filter,
  /// different n_seq_max or layer counts in the two children, or a layer held by both / neither;
  /// kNoSpace when storage cannot be mapped.
  static Result<std::unique_ptr<HybridMemory>> create(HybridMemoryConfig config);
  Result<std::unique_ptr<HybridMemory>> copy() const;

  // Memory (semantics in the header comment and in memory.h).
  using Memory::init_batch;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                            const BatchLimits& limits) override;
  // init_full: CompositeMemory.
  /// The KV child's pending shifts (the recurrent child has none).
  std::unique_ptr<MemoryContext> init_update() override;
  Status seq_rm(SeqId seq, Pos p0, Pos p1) override;
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  // seq_keep, seq_add, seq_div, seq_pos_min, clear: CompositeMemory (recurrent child first).
  Pos seq_pos_max(SeqId seq) const override;
  Result<TruncatePlan> plan_truncate(SeqId seq, Pos p) const override;
  /// Both children's tensors and streams: parts "kv", "rs", "rs_ckpt".
  MemoryBreakdown breakdown() const override;
  /// The KV child's stream, types, cells and free cells; bytes of both children (see
  /// Memory::seq_info).
  Result<SeqMemoryInfo> seq_info(SeqId seq) const override;
  // n_seq_max: CompositeMemory.

  // State save / restore (recurrent_memory_io.cc): the KV child's part (KVPT role kv ...) then the
  // recurrent child's (RSPT ...); both are validated before either is applied, and a failed
  // apply empties the destination in both. requantize / requantize_seq convert the attention
  // layers' K/V (the recurrent states stay f32).
  state_format::MemoryKindId state_kind() const override {
    return state_format::MemoryKindId::kHybrid;
  }
  Status state_write(StateWriter& w, const StateWriteSpec& spec) const override;
  Status state_read(StateReader& r, const StateReadSpec& spec) override;
  Status requantize(GgmlType k_type, GgmlType v_type) override;
  Status requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) override;

  const KvCache& kv() const { return *kv_; }
  const RecurrentMemory& rs() const { return *rs_; }
  KvCache& kv() { return *kv_; }
  RecurrentMemory& rs() { return *rs_; }

 private:
  // CompositeMemory's hooks: the children in the order sequence operations check and apply
  // them and batches are planned (the recurrent child refuses more, a head or middle range, so
  // its refusal is the one reported), the transaction, the layers each child holds.
  friend class composite::CompositeMemory<HybridMemory>;
  RecurrentMemory& first() const { return *rs_; }
  KvCache& second() const { return *kv_; }
  using Context = HybridMemoryContext;
  static constexpr const char* kFirstLayers = "recurrent layers";
  static constexpr const char* kSecondLayers = "attention layers";

  HybridMemory(std::unique_ptr<KvCache> kv, std::unique_ptr<RecurrentMemory> rs)
      : kv_(std::move(kv)), rs_(std::move(rs)) {}

  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<RecurrentMemory> rs_;
};

}  // namespace mnemo
