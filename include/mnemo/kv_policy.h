// KvPolicy: automatic K/V precision by memory pressure (`--kv-policy f16,q8_0@0.75,q4_0@0.90`).
//
// A policy is a ladder of rungs, each a K/V type pair; every rung after the first has an
// occupancy threshold, strictly increasing. The server calls step() after each decode step with
// the step at which each sequence was last active. Each move: find the highest rung whose
// threshold the occupancy reached; among the sequences on a lower rung, the least recently active
// one (ties: the one holding more cells) moves down ONE rung (Memory::requantize_seq). Moves
// repeat (up to max_moves per step) until no rung is reached or no sequence is below the reached
// rung. So under high pressure an idle sequence can move twice before an active one moves once:
// precision is taken from the idle first.
//
// Occupancy counts bytes relative to the first rung, so that moving a sequence down relieves
// the pressure it measures:
//   occupancy = sum over streams of used_cells * bytes_per_cell(stream's current types)
//             / sum over streams of n_cells * bytes_per_cell(first rung's types)
// With every stream on the first rung this is exactly used cells / total cells.
//
// Sequences and streams: in a split cache sequence s owns stream s (in every part: kv, or
// kv_base and kv_swa), so one sequence moves at a time. A unified cache has one stream for all
// sequences: the policy then moves the whole memory (Memory::requantize) one rung at a time.
//
// Every move is logged (MNEMO_LOG(kInfo)) and returned; each sequence's current types are
// visible in Memory::breakdown() (per stream k_type / v_type / rotation) and in describe().
//
// Not thread-safe: call it from the thread that owns the memory (the server loop).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/memory.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"

namespace mnemo {

/// One rung of the ladder.
struct KvRung {
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  double threshold = 0.0;  // occupancy in (0, 1] at which sequences move onto this rung; 0 for
                           // the first rung
};

class KvPolicy {
 public:
  /// One requantization the policy made.
  struct Move {
    SeqId seq = -1;  // -1: the whole memory (unified cache)
    uint32_t from_rung = 0;
    uint32_t to_rung = 0;
    uint64_t last_active = 0;  // the caller's step number for seq
    double occupancy_before = 0;
    double occupancy_after = 0;
  };

  /// Parses a ladder: rungs separated by ','; a rung is TYPE (K and V) or KTYPE/VTYPE, and every
  /// rung but the first ends in @THRESHOLD. Example: "f16,q8_0@0.75,q4_0@0.90". Types are the KV
  /// cache types (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl). Errors:
  /// kInvalidArgument naming the rung (unknown type, missing / out-of-range / non-increasing
  /// threshold, a threshold on the first rung, an empty ladder).
  static Result<KvPolicy> parse(std::string_view spec);

  const std::vector<KvRung>& rungs() const { return rungs_; }
  /// The ladder in parse()'s syntax.
  std::string to_string() const;

  /// Occupancy of a memory as defined in the header comment (0 for a memory without cells).
  double occupancy(const MemoryBreakdown& b) const;
  /// The rung whose types a stream has, or -1 when it matches none.
  int rung_of(GgmlType k_type, GgmlType v_type) const;

  /// Call after each decode step. last_active: [n_seq_max] the caller's step counter at each
  /// sequence's last decode (larger = more recent). Makes at most max_moves moves (each costs a
  /// conversion of one sequence's cells) and returns them. Errors: kInvalidArgument for a wrong
  /// last_active size; a requantization's error (kNoSpace: the new mapping was refused; the
  /// sequence stays where it was).
  Result<std::vector<Move>> step(Memory& mem, std::span<const uint64_t> last_active,
                                 uint32_t max_moves = 1);

  /// One line per stream of `b`: its sequence, rung, types and used cells; then the occupancy.
  std::string describe(const MemoryBreakdown& b) const;

 private:
  std::vector<KvRung> rungs_;
};

}  // namespace mnemo
