// Position bounds and half-open position ranges shared by the memory implementations
// (module-private).
#pragma once

#include <cstdint>

#include "mnemo/batch.h"

namespace mnemo {

// Highest position a cell, a recurrent sequence or a saved state may hold: one below INT32_MAX,
// so that "pos + 1" (the exclusive end of a range that ends at pos) never overflows. Positions
// above it are rejected by shifts (seq_add) and by state restore.
inline constexpr Pos kPosMax = INT32_MAX - 1;

// The positions [lo, hi) of a sequence operation, with the caller's open bounds resolved.
struct PosRange {
  Pos lo = 0;
  Pos hi = INT32_MAX;  // exclusive

  // True when the range holds no position.
  bool empty() const { return lo >= hi; }
  // True when the range holds no position of [pos_min, pos_max]; an empty sequence
  // (pos_max < 0) is missed by every range.
  bool misses(Pos pos_min, Pos pos_max) const {
    return pos_max < 0 || empty() || hi <= pos_min || lo > pos_max;
  }
  // True when the range holds every position of [pos_min, pos_max].
  bool covers(Pos pos_min, Pos pos_max) const { return lo <= pos_min && hi > pos_max; }
};

// The range [p0, p1) of the memory.h sequence operations: p0 < 0 means 0, p1 < 0 means
// "to the end" (INT32_MAX, past every position a cell can hold).
inline PosRange open_range(Pos p0, Pos p1) { return {p0 < 0 ? 0 : p0, p1 < 0 ? INT32_MAX : p1}; }

}  // namespace mnemo
