// KvJournal: the undo log of a KvCache transaction (module-private).
//
// Every change to a cell or a stream head made by find_slot (while planning) or by apply()
// appends the old value first; undo replays the log newest first. apply() also saves the K/V
// rows of an occupied cell it is about to hand to a new token, so undoing restores the bytes
// that the model overwrote there: only the first time a given occupied cell is reused in the
// transaction (a later reuse overwrites this transaction's own rows, which a rollback discards
// anyway). The saved bytes are therefore bounded by the cache size, however many ubatches reuse
// the same cells.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory/kv_cells.h"
#include "mnemo/batch.h"

namespace mnemo {

struct KvJournal {
  struct Entry {
    bool is_head = false;  // a head change (only stream and pos = old head are meaningful)
    uint32_t stream = 0;
    uint32_t cell = 0;
    Pos pos = -1;          // old pos (or old head)
    int32_t shift = 0;     // old shift
    SeqSet seqs;           // old sequences
    int64_t row_off = -1;  // offset of the saved K/V rows in `rows`, -1 when none were saved
  };
  std::vector<Entry> entries;
  std::vector<uint8_t> rows;  // saved K/V rows (KvStorage::save_cell layout), back to back
  std::vector<std::vector<uint64_t>> touched;  // [n_stream][ceil(n_cells / 64)], lazily sized

  bool empty() const { return entries.empty(); }
  void clear() {
    entries.clear();
    rows.clear();
    touched.clear();
  }
  /// Marks (stream, cell) as saved; true the first time in this journal. Called only for reused
  /// occupied cells, so the bitmap (n_cells / 8 bytes) is made only for streams that reuse.
  bool first_touch(uint32_t stream, uint32_t cell, uint32_t n_stream, uint32_t n_cells) {
    if (touched.size() < n_stream) touched.resize(n_stream);
    std::vector<uint64_t>& bits = touched[stream];
    if (bits.empty()) bits.assign((n_cells + 63) / 64, 0);
    const uint64_t bit = uint64_t{1} << (cell & 63);
    const bool first = (bits[cell >> 6] & bit) == 0;
    bits[cell >> 6] |= bit;
    return first;
  }
};

}  // namespace mnemo
