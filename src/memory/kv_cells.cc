#include "memory/kv_cells.h"

#include <iterator>

namespace mnemo {

KvCells::KvCells(uint32_t n_cells, uint32_t n_seq_max)
    : pos_(n_cells, -1),
      shift_(n_cells, 0),
      seqs_(n_cells),
      occ_((n_cells + 63) / 64, 0),
      seq_cells_(n_seq_max) {
  CHECK(n_cells > 0);
  CHECK(n_seq_max >= 1 && n_seq_max <= kMaxSeq) << "n_seq_max " << n_seq_max;
}

void KvCells::seq_cells(SeqId s, Pos p0, Pos p1, std::vector<uint32_t>* out) const {
  const auto& cells = seq_cells_[s];
  for (auto it = cells.lower_bound({p0, 0}); it != cells.end() && it->first < p1; ++it) {
    out->push_back(it->second);
  }
}

void KvCells::set(uint32_t i, Pos pos, const SeqSet& seqs, int32_t shift) {
  DCHECK(i < size());
  if (seqs.none()) {
    pos = -1;
    shift = 0;
  }
  DCHECK(seqs.none() || pos >= 0) << "cell " << i << " pos " << pos;
  const Pos old_pos = pos_[i];
  const SeqSet old_seqs = seqs_[i];
  const bool was_used = old_seqs.any();
  const bool now_used = seqs.any();

  if (old_pos != pos || old_seqs != seqs) {
    // Drop the memberships that change, then add the new ones.
    old_seqs.for_each([&](SeqId s) {
      if (old_pos != pos || !seqs.test(s)) {
        auto& cells = seq_cells_[s];
        const std::pair<Pos, uint32_t> key{old_pos, i};
        // The newest or oldest entry is the common case (undo of an append, eviction of the
        // oldest, trimming a tail): erase it without a search from the root.
        if (*cells.rbegin() == key) {
          cells.erase(std::prev(cells.end()));
        } else if (*cells.begin() == key) {
          cells.erase(cells.begin());
        } else {
          const size_t n = cells.erase(key);
          DCHECK(n == 1);
        }
      }
    });
    seqs.for_each([&](SeqId s) {
      DCHECK(static_cast<uint32_t>(s) < seq_cells_.size()) << "seq_id " << s;
      if (old_pos != pos || !old_seqs.test(s)) {
        auto& cells = seq_cells_[s];
        const std::pair<Pos, uint32_t> key{pos, i};
        // Appending after the current last position is the common case: O(1) with the hint.
        if (cells.empty() || *cells.rbegin() < key) {
          cells.emplace_hint(cells.end(), key);
        } else {
          cells.insert(key);
        }
      }
    });
  }

  n_shifted_ += (shift != 0) - (shift_[i] != 0);
  pos_[i] = pos;
  shift_[i] = shift;
  seqs_[i] = seqs;

  if (was_used != now_used) {
    if (now_used) {
      ++used_;
      occ_[i >> 6] |= uint64_t{1} << (i & 63);
      if (i + 1 > used_max_) used_max_ = i + 1;
    } else {
      --used_;
      occ_[i >> 6] &= ~(uint64_t{1} << (i & 63));
      if (i + 1 == used_max_) recompute_used_max();
    }
  }
}

void KvCells::recompute_used_max() {
  // Scan the occupancy words down from the old maximum: 64 cells per step.
  size_t w = (used_max_ + 63) / 64;
  while (w > 0 && occ_[w - 1] == 0) --w;
  used_max_ = w == 0 ? 0 : static_cast<uint32_t>((w - 1) * 64 + 64 - std::countl_zero(occ_[w - 1]));
}

void KvCells::clear() {
  std::fill(pos_.begin(), pos_.end(), -1);
  std::fill(shift_.begin(), shift_.end(), 0);
  std::fill(seqs_.begin(), seqs_.end(), SeqSet());
  std::fill(occ_.begin(), occ_.end(), 0);
  for (auto& cells : seq_cells_) cells.clear();
  used_ = 0;
  used_max_ = 0;
  n_shifted_ = 0;
  head_ = 0;
}

}  // namespace mnemo
