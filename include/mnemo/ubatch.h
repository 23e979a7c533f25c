// Ubatch: the slice of a batch that one forward pass processes, and the strategies that cut a
// validated batch (include/mnemo/batch.h) into ubatches of at most n_ubatch rows.
//
//   split_simple  rows in the caller's order, n_ubatch at a time. Any mix of sequences; what a
//                 unified KV cache (one stream shared by all sequences) uses.
//   split_equal   each ubatch takes the same number of rows (n_seq_tokens) from each of a run of
//                 consecutive sequence ids s0, s0+1, ..., s1 (a contiguous stream range), rows
//                 grouped by sequence: [s0's n_seq_tokens rows][s0+1's rows]...; what a split KV
//                 cache (one stream per sequence) uses. Needs single-sequence rows.
//   split_seq     one sequence per ubatch (up to n_ubatch of its rows, in order); what recurrent
//                 memory uses. Needs single-sequence rows.
//
// Within one sequence rows keep the caller's order (so positions stay increasing) in every
// strategy. Every ubatch row remembers its row in the batch (batch_row), and output_order()
// maps outputs back to the caller's order whatever the split.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/status.h"

namespace mnemo {

enum class SplitStrategy : uint8_t { kSimple, kEqual, kSeq };

/// "simple", "equal", "seq".
std::string_view split_strategy_name(SplitStrategy s);

/// At most n_ubatch rows copied out of a batch (the ubatch owns its data; the batch may be
/// destroyed afterwards). Value type.
struct Ubatch {
  std::vector<int32_t> token;       // [n_tokens] token ids (empty for an embedding batch)
  std::vector<float> embd;          // [n_tokens, n_embd] row-major (empty for a token batch)
  uint32_t n_embd = 0;              // 0 for a token batch
  std::vector<Pos> pos;             // [n_tokens] resolved positions
  std::vector<uint32_t> seq_begin;  // [n_tokens + 1] offsets into seq_id_flat
  std::vector<SeqId> seq_id_flat;   // every row's seq ids, concatenated
  std::vector<uint8_t> output;      // [n_tokens] 1 when the row needs an output
  std::vector<uint32_t> batch_row;  // [n_tokens] the row's index in the caller's batch

  SplitStrategy strategy = SplitStrategy::kSimple;
  /// Distinct primary seq ids of the rows, ascending. For kEqual they are consecutive and the
  /// rows are grouped by them: rows [k * n_seq_tokens, (k + 1) * n_seq_tokens) belong to seqs[k].
  std::vector<SeqId> seqs;
  /// kEqual: rows per sequence. kSeq: n_tokens. kSimple: 0 (no grouping).
  uint32_t n_seq_tokens = 0;

  uint32_t n_tokens() const { return static_cast<uint32_t>(pos.size()); }
  /// Primary (first) sequence of row i.
  SeqId seq_id(uint32_t i) const { return seq_id_flat[seq_begin[i]]; }
  /// All sequences of row i.
  std::span<const SeqId> seq_ids(uint32_t i) const {
    return {seq_id_flat.data() + seq_begin[i], seq_begin[i + 1] - seq_begin[i]};
  }
  uint32_t n_outputs() const;
};

/// Cuts `batch` into ubatches of at most n_ubatch rows with the given strategy; every row of the
/// batch lands in exactly one ubatch. Errors: kInvalidArgument when n_ubatch == 0, or for kEqual /
/// kSeq when a row belongs to several sequences.
Result<std::vector<Ubatch>> split_batch(const PreparedBatch& batch, SplitStrategy strategy,
                                        uint32_t n_ubatch);

/// Output mapping: for the k-th output produced while processing `ubatches` in order (rows with
/// output set, in ubatch row order), result[k] is its index in the caller's order (the rank of
/// its batch row among all output rows of the batch). Size: total outputs. A permutation.
std::vector<uint32_t> output_order(std::span<const Ubatch> ubatches);

}  // namespace mnemo
