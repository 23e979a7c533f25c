// KvJournal: the undo log of a KvCache transaction (module-private).
//
// Every change to a cell or a stream head made by find_slot (while planning) or by apply()
// appends the old value first; undo replays the log newest first. apply() also saves the K/V
// rows of each occupied cell it is about to hand to a new token, so undoing restores the bytes
// that the model overwrote there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/kv_cells.h"

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

  bool empty() const { return entries.empty(); }
  void clear() {
    entries.clear();
    rows.clear();
  }
};

}  // namespace mnemo
