// Batch: the rows a caller hands to the memory in one decode call, and their validation.
//
// A row is one token id (or one embedding vector of n_embd floats), its position in its
// sequence, the sequence(s) it belongs to, and whether the caller wants an output (logits or an
// embedding) for it. Rows are stored as parallel arrays in the order the caller added them; that
// order is "the caller's order" that outputs are returned in (include/mnemo/ubatch.h).
//
// Validation (prepare_batch) is where outside input is checked, with a message naming the row:
//   - the batch is non-empty and has at most n_batch rows;
//   - all rows are token rows, or all are embedding rows of the same width (== n_embd if given);
//   - token ids lie in [0, n_vocab) when n_vocab is given;
//   - every row has at least one seq_id, each in [0, n_seq_max), none repeated;
//   - when multi-sequence rows are not allowed (split-mode KV caches: one stream per sequence),
//     every row has exactly one seq_id; share a prefix with seq_cp instead;
//   - positions continue each sequence: the first row of sequence s has position
//     seq_pos_max(s) + 1 (0 for an empty sequence) and each later row of s the previous one + 1.
//     A batch may instead leave every position to the memory ("auto positions"): rows added
//     without a position get seq_pos_max(s) + 1, + 2, ...; a multi-sequence row then needs the
//     same next position in all its sequences. Explicit and automatic rows cannot be mixed.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "mnemo/status.h"

namespace mnemo {

/// Position of a token within its sequence (0-based).
using Pos = int32_t;
/// Sequence id: one conversation. Valid ids are [0, n_seq_max), n_seq_max <= kMaxSeq.
using SeqId = int32_t;

/// Upper bound of n_seq_max (cells keep a 256-bit sequence set).
inline constexpr uint32_t kMaxSeq = 256;

/// Rows of input for one decode call. Cheap to build row by row; no validation happens here
/// (see prepare_batch). Value type: copyable and movable.
class Batch {
 public:
  Batch() = default;

  /// Appends a token row at an explicit position.
  void add(int32_t token, Pos pos, std::initializer_list<SeqId> seq_ids, bool output = false) {
    add(token, pos, std::span<const SeqId>(seq_ids.begin(), seq_ids.size()), output);
  }
  void add(int32_t token, Pos pos, std::span<const SeqId> seq_ids, bool output);

  /// Appends a token row whose position the memory fills in (auto positions).
  void add_auto(int32_t token, std::initializer_list<SeqId> seq_ids, bool output = false) {
    add_auto(token, std::span<const SeqId>(seq_ids.begin(), seq_ids.size()), output);
  }
  void add_auto(int32_t token, std::span<const SeqId> seq_ids, bool output);

  /// Appends an embedding row (embd.size() floats, the same for every row) at a position.
  void add_embd(std::span<const float> embd, Pos pos, std::span<const SeqId> seq_ids, bool output);

  /// Removes every row.
  void clear();

  uint32_t n_tokens() const { return static_cast<uint32_t>(pos_.size()); }
  bool empty() const { return pos_.empty(); }
  /// True for an embedding batch (rows carry n_embd() floats instead of token ids).
  bool is_embd() const { return n_embd_ > 0; }
  /// Width of embedding rows; 0 for a token batch.
  uint32_t n_embd() const { return n_embd_; }

  /// Row i's token id (token batches only).
  int32_t token(uint32_t i) const { return token_[i]; }
  /// Row i's embedding, [n_embd] floats (embedding batches only).
  std::span<const float> embd(uint32_t i) const {
    return {embd_.data() + static_cast<size_t>(i) * n_embd_, n_embd_};
  }
  /// Row i's position, or kAutoPos when the row asked for an automatic one.
  Pos pos(uint32_t i) const { return pos_[i]; }
  /// Row i's sequences, in the order given (the first is the row's primary sequence).
  std::span<const SeqId> seq_ids(uint32_t i) const {
    return {seq_id_.data() + seq_begin_[i], seq_begin_[i + 1] - seq_begin_[i]};
  }
  bool output(uint32_t i) const { return output_[i] != 0; }

  /// Marker stored by add_auto() in place of a position.
  static constexpr Pos kAutoPos = INT32_MIN;

 private:
  friend Status check_batch_shape(const Batch& batch);
  void add_row(Pos pos, std::span<const SeqId> seq_ids, bool output);

  std::vector<int32_t> token_;  // [n_tokens] (token batches)
  std::vector<float> embd_;     // [n_tokens, n_embd] row-major (embedding batches)
  uint32_t n_embd_ = 0;
  std::vector<Pos> pos_;                // [n_tokens]
  std::vector<uint32_t> seq_begin_{0};  // [n_tokens + 1] offsets into seq_id_
  std::vector<SeqId> seq_id_;           // all rows' seq ids, concatenated
  std::vector<uint8_t> output_;         // [n_tokens] 0 / 1
  std::string shape_error_;             // first misuse of the builder (mixed row kinds, ...)
};

/// Limits a batch is validated against. A zero n_batch / n_vocab / n_embd is not checked.
struct BatchLimits {
  uint32_t n_batch = 0;              // max rows per batch
  uint32_t n_vocab = 0;              // token ids must be < n_vocab
  uint32_t n_embd = 0;               // embedding rows must have this width
  uint32_t n_seq_max = 1;            // seq ids must be < n_seq_max (<= kMaxSeq)
  bool allow_multi_seq_rows = true;  // false in split mode: one seq_id per row
};

/// A validated batch with every position resolved. Refers to the Batch it was made from, which
/// must outlive it and stay unchanged.
struct PreparedBatch {
  const Batch* batch = nullptr;
  std::vector<Pos> pos;         // [n_tokens] resolved positions
  uint32_t n_seq_max = 0;       // from the limits it was validated against
  bool multi_seq_rows = false;  // some row belongs to more than one sequence

  uint32_t n_tokens() const { return static_cast<uint32_t>(pos.size()); }
};

/// The current last position of a sequence in the memory, -1 when it holds none.
using SeqPosMaxFn = std::function<Pos(SeqId)>;

/// Validates `batch` against `limits` and the memory's sequence ends (see the list at the top of
/// this header) and resolves automatic positions. Errors: kInvalidArgument with a message that
/// names the first offending row, sequence and values. The batch is not modified.
Result<PreparedBatch> prepare_batch(const Batch& batch, const BatchLimits& limits,
                                    const SeqPosMaxFn& seq_pos_max);

/// Checks only what does not depend on a memory: builder misuse (mixed token / embedding rows,
/// different embedding widths). Used by prepare_batch.
Status check_batch_shape(const Batch& batch);

}  // namespace mnemo
