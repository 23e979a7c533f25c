// Position bounds, half-open position ranges and the sequence id check shared by the memory
// implementations (module-private).
#pragma once

#include <cstdint>
#include <string>

#include "mnemo/batch.h"
#include "mnemo/status.h"

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

// Calls f(s) for the sequences an operation on `seq` touches: seq itself, or every sequence
// [0, n_seq_max) in order when seq < 0 (seq_rm's "all sequences", memory.h).
template <class F>
void for_each_seq(SeqId seq, uint32_t n_seq_max, F&& f) {
  if (seq >= 0) {
    f(seq);
    return;
  }
  for (SeqId s = 0; s < static_cast<SeqId>(n_seq_max); ++s) f(s);
}

// OK when seq is one of the memory's sequences [0, n_seq_max); otherwise kInvalidArgument
// "<op>: <what> <seq> is outside [0, n_seq_max = <n_seq_max>)".
inline Status check_seq_id(SeqId seq, uint32_t n_seq_max, const char* op, const char* what) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= n_seq_max) {
    return Status::invalid_argument(std::string(op) + ": " + what + " " + std::to_string(seq) +
                                    " is outside [0, n_seq_max = " + std::to_string(n_seq_max) +
                                    ")");
  }
  return Status();
}

}  // namespace mnemo
