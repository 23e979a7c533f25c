// KvCells: the bookkeeping of one KV stream, apart from the K/V bytes (docs/design.md §3.2).
//
// A stream has n_cells cells. An empty cell has pos -1, no sequences and shift 0. An occupied
// cell holds one token's K/V: its position, the set of sequences that share it (a shared prefix
// in a unified cache belongs to several), and the pending RoPE shift (the sum of seq_add /
// seq_div deltas applied to pos since K was last rotated; cleared by init_update's apply()).
//
// Derived indexes, kept exact by set(), the single mutation primitive:
//   - per sequence, the ordered set of (pos, cell) pairs: seq_pos_min / seq_pos_max in O(1),
//     the cells of a position range in O(log n + k);
//   - used (occupied cells), used_max (1 + index of the last occupied cell: attention scans only
//     [0, used_max) padded), n_shifted (cells with a non-zero pending shift).
// Because every field is either stored per cell or derived from the cells, restoring the old
// (pos, seqs, shift) of each changed cell plus the head restores the whole object exactly.
//
// Value type (copyable). Not thread-safe.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/check.h"

namespace mnemo {

/// A set of sequence ids in [0, kMaxSeq), one bit each.
class SeqSet {
 public:
  SeqSet() = default;
  static SeqSet of(SeqId s) {
    SeqSet r;
    r.set(s);
    return r;
  }

  bool test(SeqId s) const { return (w_[s >> 6] >> (s & 63)) & 1u; }
  void set(SeqId s) { w_[s >> 6] |= uint64_t{1} << (s & 63); }
  void reset(SeqId s) { w_[s >> 6] &= ~(uint64_t{1} << (s & 63)); }
  bool any() const { return (w_[0] | w_[1] | w_[2] | w_[3]) != 0; }
  bool none() const { return !any(); }
  uint32_t count() const {
    return std::popcount(w_[0]) + std::popcount(w_[1]) + std::popcount(w_[2]) +
           std::popcount(w_[3]);
  }
  /// The smallest member; -1 when empty.
  SeqId first() const {
    for (int k = 0; k < 4; ++k) {
      if (w_[k] != 0) return k * 64 + std::countr_zero(w_[k]);
    }
    return -1;
  }
  /// Calls f(seq_id) for every member, ascending.
  template <typename F>
  void for_each(F&& f) const {
    for (int k = 0; k < 4; ++k) {
      for (uint64_t w = w_[k]; w != 0; w &= w - 1)
        f(static_cast<SeqId>(k * 64 + std::countr_zero(w)));
    }
  }
  bool operator==(const SeqSet& o) const = default;

 private:
  std::array<uint64_t, 4> w_{};  // bit s of word s / 64: sequence s is a member
};

class KvCells {
 public:
  /// n_cells cells, all empty; sequences [0, n_seq_max) may be stored (n_seq_max <= kMaxSeq).
  KvCells(uint32_t n_cells, uint32_t n_seq_max);

  uint32_t size() const { return static_cast<uint32_t>(pos_.size()); }
  uint32_t n_seq_max() const { return static_cast<uint32_t>(seq_cells_.size()); }
  uint32_t used() const { return used_; }
  uint32_t used_max() const { return used_max_; }
  uint32_t n_shifted() const { return n_shifted_; }
  /// Where find_slot starts looking (the cell after the last placement).
  uint32_t head() const { return head_; }
  void set_head(uint32_t head) {
    DCHECK(head < size());
    head_ = head;
  }

  bool is_empty(uint32_t i) const { return seqs_[i].none(); }
  Pos pos(uint32_t i) const { return pos_[i]; }
  int32_t shift(uint32_t i) const { return shift_[i]; }
  const SeqSet& seqs(uint32_t i) const { return seqs_[i]; }
  bool seq_has(uint32_t i, SeqId s) const { return seqs_[i].test(s); }

  /// Lowest / highest position held by sequence s in this stream; -1 when it holds none.
  Pos seq_pos_min(SeqId s) const {
    return seq_cells_[s].empty() ? -1 : seq_cells_[s].begin()->first;
  }
  Pos seq_pos_max(SeqId s) const {
    return seq_cells_[s].empty() ? -1 : seq_cells_[s].rbegin()->first;
  }
  /// The cell holding sequence s's lowest position (lowest cell index among equals); requires
  /// seq_n_cells(s) > 0.
  uint32_t seq_first_cell(SeqId s) const { return seq_cells_[s].begin()->second; }
  /// Number of cells holding sequence s.
  uint32_t seq_n_cells(SeqId s) const { return static_cast<uint32_t>(seq_cells_[s].size()); }
  /// Appends to *out the cells of sequence s with pos in [p0, p1), ascending by (pos, cell).
  void seq_cells(SeqId s, Pos p0, Pos p1, std::vector<uint32_t>* out) const;

  /// The one mutation: cell i becomes (pos, seqs, shift); seqs empty = the cell becomes empty
  /// (pos and shift are then ignored and stored as -1 and 0). O(|old seqs| + |new seqs|) set
  /// updates, each O(log n) (O(1) when appending at the end of a sequence).
  void set(uint32_t i, Pos pos, const SeqSet& seqs, int32_t shift);
  void clear_cell(uint32_t i) { set(i, -1, SeqSet(), 0); }
  /// Empties every cell and resets head to 0.
  void clear();

 private:
  void recompute_used_max();

  std::vector<Pos> pos_;        // [n_cells] position, -1 when empty
  std::vector<int32_t> shift_;  // [n_cells] pending RoPE shift
  std::vector<SeqSet> seqs_;    // [n_cells] sequences sharing the cell
  std::vector<uint64_t> occ_;   // [ceil(n_cells / 64)] bit i: cell i occupied
  std::vector<std::set<std::pair<Pos, uint32_t>>> seq_cells_;  // [n_seq_max] (pos, cell)
  uint32_t used_ = 0;
  uint32_t used_max_ = 0;
  uint32_t n_shifted_ = 0;
  uint32_t head_ = 0;
};

}  // namespace mnemo
