// KvCache placement: find_slot, planning a batch on the live cells under a journal, committing a
// planned ubatch (apply), and undo. See the find_slot paragraph in src/memory/kv_cache.h.

#include <algorithm>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/kv_journal.h"

namespace mnemo {

namespace {

// Marks "no snapshot" in pos_max_before_.
constexpr Pos kUnset = INT32_MIN;

SeqSet row_seqs(const Ubatch& ub, uint32_t row) {
  SeqSet s;
  for (SeqId id : ub.seq_ids(row)) s.set(id);
  return s;
}

}  // namespace

void KvCache::journal_set(KvJournal* journal, uint32_t stream, uint32_t cell, Pos pos,
                          const SeqSet& seqs, int32_t shift, bool save_rows) {
  KvCells& c = cells_[stream];
  if (journal != nullptr) {
    KvJournal::Entry e;
    e.stream = stream;
    e.cell = cell;
    e.pos = c.pos(cell);
    e.shift = c.shift(cell);
    e.seqs = c.seqs(cell);
    // Only occupied cells need their bytes; the first change of each keeps the original ones.
    if (save_rows && !c.is_empty(cell) && storage_.cell_bytes(stream) > 0 &&
        journal->first_touch(stream, cell, n_stream(), c.size())) {
      e.row_off = static_cast<int64_t>(journal->rows.size());
      journal->rows.resize(journal->rows.size() + storage_.cell_bytes(stream));
      storage_.save_cell(stream, cell, journal->rows.data() + e.row_off);
    }
    journal->entries.push_back(e);
  }
  c.set(cell, pos, seqs, shift);
}

void KvCache::journal_head(KvJournal* journal, uint32_t stream, uint32_t head) {
  KvCells& c = cells_[stream];
  if (journal != nullptr) {
    KvJournal::Entry e;
    e.is_head = true;
    e.stream = stream;
    e.pos = static_cast<Pos>(c.head());
    journal->entries.push_back(e);
  }
  c.set_head(head);
}

void KvCache::undo(KvJournal* journal) {
  for (auto it = journal->entries.rbegin(); it != journal->entries.rend(); ++it) {
    KvCells& c = cells_[it->stream];
    if (it->is_head) {
      c.set_head(static_cast<uint32_t>(it->pos));
      continue;
    }
    c.set(it->cell, it->pos, it->seqs, it->shift);
    if (it->row_off >= 0) {
      storage_.restore_cell(it->stream, it->cell, journal->rows.data() + it->row_off);
    }
  }
  journal->clear();
}

bool KvCache::find_slot(const Ubatch& ub, StreamSlots* slots, KvJournal* journal,
                        std::string* why) {
  const uint32_t stream = slots->stream;
  KvCells& c = cells_[stream];
  const uint32_t n = static_cast<uint32_t>(slots->rows.size());
  const uint32_t n_cells = c.size();
  slots->cells.clear();
  if (n > n_cells) {
    *why = "stream " + std::to_string(stream) + " needs " + std::to_string(n) +
           " cells for one ubatch but has only " + std::to_string(n_cells);
    return false;
  }

  // The window is judged from each owner's next position *before* this ubatch: every row of the
  // ubatch writes its K/V before any row attends, so an evicted cell must be hidden from all of
  // them. Sequences of this ubatch get a snapshot; others cannot change until they are evicted.
  std::vector<SeqId> snap;
  for (uint32_t row : slots->rows) {
    for (SeqId s : ub.seq_ids(row)) {
      if (pos_max_before_[s] == kUnset) {
        pos_max_before_[s] = c.seq_pos_max(s);
        snap.push_back(s);
      }
    }
  }
  const SwaType swa = config_.swa_reuse ? config_.swa_type : SwaType::kNone;
  const uint32_t n_swa = config_.n_swa;
  const bool causal = config_.causal;
  auto usable = [&](uint32_t cell, uint32_t row) {
    if (c.is_empty(cell)) return true;
    const Pos pc = c.pos(cell);
    const Pos p = ub.pos[row];
    const std::span<const SeqId> mine = ub.seq_ids(row);
    bool ok = true;
    c.seqs(cell).for_each([&](SeqId s) {
      if (!ok) return;
      if (causal && pc >= p) {
        for (SeqId m : mine) {
          if (m == s) return;  // causally overwritten: the row's own sequence, later position
        }
      }
      if (swa != SwaType::kNone) {
        const Pos before = pos_max_before_[s] != kUnset ? pos_max_before_[s] : c.seq_pos_max(s);
        if (pc == c.seq_pos_min(s) && is_masked_swa(swa, n_swa, pc, before + 1)) return;
      }
      ok = false;
    });
    return ok;
  };

  uint32_t cursor = c.head();
  uint32_t placed = 0;
  auto place = [&](uint32_t cell) {
    const uint32_t row = slots->rows[placed];
    journal_set(journal, stream, cell, ub.pos[row], row_seqs(ub, row), 0, /*save_rows=*/false);
    slots->cells.push_back(cell);
    ++placed;
  };
  // One sweep from head, wrapping: empty cells and masked cells in ring order (the fast path
  // when the cells after head are free).
  for (uint32_t scanned = 0; scanned < n_cells && placed < n; ++scanned) {
    const uint32_t cell = cursor;
    cursor = cursor + 1 == n_cells ? 0 : cursor + 1;
    if (usable(cell, slots->rows[placed])) place(cell);
  }
  // The sweep may pass a masked cell before it became its owner's oldest (sequences interleaved
  // in a unified stream, holes refilled after seq_rm). Evict each sequence's oldest cells
  // directly, in position order, until nothing more qualifies: O(sequences + cells evicted).
  for (bool progress = swa != SwaType::kNone; progress && placed < n;) {
    progress = false;
    for (SeqId s = 0; s < static_cast<SeqId>(c.n_seq_max()) && placed < n; ++s) {
      while (placed < n && c.seq_n_cells(s) > 0 &&
             usable(c.seq_first_cell(s), slots->rows[placed])) {
        place(c.seq_first_cell(s));
        progress = true;
      }
    }
  }
  for (SeqId s : snap) pos_max_before_[s] = kUnset;

  if (placed < n) {
    *why = "no room in stream " + std::to_string(stream) + ": " + std::to_string(n) +
           " cells needed, " + std::to_string(placed) + " usable (" + std::to_string(c.used()) +
           " of " + std::to_string(n_cells) +
           " cells in use, none of the others masked for "
           "every sequence in them)";
    return false;
  }
  slots->contiguous = slots->cells.back() + 1 == slots->cells.front() + n;
  for (uint32_t k = 1; slots->contiguous && k < n; ++k) {
    slots->contiguous = slots->cells[k] == slots->cells[k - 1] + 1;
  }
  const uint32_t last = slots->cells.back();
  journal_head(journal, stream, last + 1 == n_cells ? 0 : last + 1);
  return true;
}

bool KvCache::place_ubatch(const Ubatch& ub, std::vector<StreamSlots>* placement,
                           KvJournal* journal, std::string* why) {
  placement->clear();
  const uint32_t n = ub.n_tokens();
  if (config_.unified) {
    StreamSlots& sl = placement->emplace_back();
    sl.stream = 0;
    sl.rows.resize(n);
    for (uint32_t i = 0; i < n; ++i) sl.rows[i] = i;
  } else {
    // ub.seqs is ascending and stream_of is the identity: one entry per sequence, in order.
    for (SeqId s : ub.seqs) placement->emplace_back().stream = stream_of(s);
    for (uint32_t i = 0; i < n; ++i) {
      const auto it = std::lower_bound(ub.seqs.begin(), ub.seqs.end(), ub.seq_id(i));
      DCHECK(it != ub.seqs.end() && *it == ub.seq_id(i));
      (*placement)[it - ub.seqs.begin()].rows.push_back(i);
    }
  }
  for (StreamSlots& sl : *placement) {
    if (!find_slot(ub, &sl, journal, why)) return false;
  }
  return true;
}

void KvCache::apply_placement(const Ubatch& ub, const std::vector<StreamSlots>& placement,
                              KvJournal* journal) {
  for (const StreamSlots& sl : placement) {
    for (size_t k = 0; k < sl.rows.size(); ++k) {
      const uint32_t row = sl.rows[k];
      journal_set(journal, sl.stream, sl.cells[k], ub.pos[row], row_seqs(ub, row), 0,
                  /*save_rows=*/true);
    }
    const uint32_t last = sl.cells.back();
    journal_head(journal, sl.stream, last + 1 == cells_[sl.stream].size() ? 0 : last + 1);
  }
}

std::unique_ptr<KvCacheContext> KvCache::prepare(
    std::shared_ptr<const std::vector<Ubatch>> ubatches) {
  CHECK(ubatches != nullptr);
  std::unique_ptr<KvCacheContext> ctx(new KvCacheContext(this, KvCacheContext::Mode::kBatch));
  ctx->placements_.resize(ubatches->size());
  // Plan on the live cells under a journal, then undo: each ubatch is placed in the state the
  // previous ones leave, and the cost stays O(cells touched) (no copy of the bookkeeping).
  KvJournal plan;
  std::string why;
  for (size_t i = 0; i < ubatches->size(); ++i) {
    const Ubatch& ub = (*ubatches)[i];
    for (uint32_t r = 0; r < ub.n_tokens(); ++r) {  // prepare() takes validated ubatches
      CHECK(ub.pos[r] >= 0 && (config_.unified || ub.seq_ids(r).size() == 1));
      for (SeqId s : ub.seq_ids(r)) CHECK(s >= 0 && static_cast<uint32_t>(s) < config_.n_seq_max);
    }
    if (!place_ubatch(ub, &ctx->placements_[i], &plan, &why)) {
      undo(&plan);
      return std::unique_ptr<KvCacheContext>(
          new KvCacheContext(this, KvCacheContext::Mode::kBatch, MemoryStatus::kFailedPrepare,
                             "ubatch " + std::to_string(i) + " of " +
                                 std::to_string(ubatches->size()) + " does not fit: " + why));
    }
  }
  undo(&plan);
  ctx->ubatches_ = std::move(ubatches);
  ctx->epoch_ = epoch_;
  return ctx;
}

}  // namespace mnemo
