// Test helpers for the memory subsystem (linked into tests only): making a memory from a valid
// config, a fake "model" that writes a deterministic K/V pattern, byte snapshots of a cache, and
// RefMemory, a plain reference model of which positions each sequence holds (no cells, no
// streams' capacity, no journal).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/swa_kv_cache.h"
#include "mnemo/check.h"
#include "mnemo/memory.h"

namespace mnemo::testing {

/// The memory M::create(config) makes (M: KvCache, SwaKvCache, RecurrentMemory, HybridMemory),
/// for a test whose config is valid: an error is a bug of the test (CHECK-fails with it).
template <class M, class Config>
std::unique_ptr<M> create_or_die(Config config) {
  auto r = M::create(std::move(config));
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

/// The window rule written independently of is_masked_swa (kv_cache.h), as the visible range:
/// standard: a token at p sees pos_cell in (p - n_swa, p]; chunked: [p - p % n_swa, p].
bool ref_window_hides(SwaType t, uint32_t n_swa, Pos pos_cell, Pos pos_token);

/// The tag of batch row `row` of the batch numbered `generation`: what the fake model writes.
inline uint64_t make_tag(uint64_t generation, uint32_t row) { return (generation << 20) | row; }

/// Fills a K (kind 'K') or V row of model layer il with the pattern of `tag`: the first 8 bytes
/// hold tag ^ key(il, kind), the rest a hash stream of (tag, il, kind).
void fill_row(uint8_t* row, size_t n_bytes, uint32_t il, char kind, uint64_t tag);
/// True when the row holds exactly fill_row's pattern for some tag; stores that tag.
bool decode_row(const uint8_t* row, size_t n_bytes, uint32_t il, char kind, uint64_t* tag);

/// The fake forward pass: for the current ubatch of `ctx` (after apply()), writes the pattern of
/// make_tag(generation, batch_row) into the K and V rows of every placed cell of every layer in
/// [0, n_layer) that the memory holds.
void write_fake_kv(const MemoryContext& ctx, uint32_t n_layer, uint64_t generation);
/// Writes garbage into every placed cell (a forward pass that fails half-way).
void scribble_kv(const MemoryContext& ctx, uint32_t n_layer);

/// Everything observable about a cache, as bytes: per stream head, used, used_max, n_shifted;
/// per cell pos, shift, sequences; per sequence pos_min / pos_max; and the K/V rows of every
/// occupied cell in every held layer. Equal snapshots = equal memories (invariant 2).
std::string snapshot(const KvCache& cache);
std::string snapshot(const SwaKvCache& cache);

/// One logical cell of the reference: a token's position, the sequences sharing it, its pending
/// shift and the tag of the row that wrote it.
struct RefEntry {
  Pos pos = 0;
  SeqSet seqs;
  int32_t shift = 0;
  uint64_t tag = 0;
};

/// Reference model with the documented semantics of memory.h, written independently of the
/// cells (no indices, no capacity, no head).
class RefMemory {
 public:
  RefMemory(bool unified, uint32_t n_seq_max) : unified_(unified), n_seq_max_(n_seq_max) {}

  Pos pos_min(SeqId s) const;
  Pos pos_max(SeqId s) const;
  std::vector<Pos> all_pos_max() const;
  const std::vector<RefEntry>& entries() const { return entries_; }
  uint32_t stream_of(const RefEntry& e) const { return unified_ ? 0 : e.seqs.first(); }

  void add(Pos pos, const SeqSet& seqs, uint64_t tag) { entries_.push_back({pos, seqs, 0, tag}); }
  void seq_rm(SeqId seq, Pos p0, Pos p1);
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  void seq_keep(SeqId seq);
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int32_t d);
  void clear_shifts();
  /// Entries of seq that seq_cp(seq, ..., p0, p1) would copy.
  uint32_t count(SeqId seq, Pos p0, Pos p1) const;

  /// Compares with `cache`: every occupied cell must be an entry (same pos, sequences, shift,
  /// and K/V rows of every held layer holding the entry's tag pattern); every entry must be a
  /// cell, except, when `swa_evict`, entries that the window of each of their sequences hid from
  /// that sequence's next position (pos_max_before[s] + 1) and that lie at or below the
  /// sequence's remaining minimum (oldest first). Evicted entries are dropped. Returns "" or what
  /// differs.
  std::string reconcile(const KvCache& cache, const std::vector<Pos>& pos_max_before,
                        bool swa_evict);
  /// Entries dropped by reconcile as evicted, so far.
  uint64_t n_evicted() const { return n_evicted_; }
  void clear() { entries_.clear(); }

 private:
  uint64_t n_evicted_ = 0;
  bool unified_;
  uint32_t n_seq_max_;
  std::vector<RefEntry> entries_;
};

}  // namespace mnemo::testing
