// RecurrentMemory: the memory of recurrent layers (Mamba-style state-space models;
// docs/design.md §3.4), and RecurrentMemoryContext, its per-batch transaction. Semantics of the
// sequence operations: include/mnemo/memory.h ("recurrent memory" block).
//
// What a recurrent layer remembers. A Mamba block (Gu & Dao 2023, "Mamba: Linear-Time Sequence
// Modeling with Selective State Spaces"; Mamba-2 / SSD: Dao & Gu 2024, "Transformers are SSMs")
// reads a sequence token by token and keeps, per sequence and layer, two fixed-size f32 states:
//   conv state  the last d_conv - 1 inputs of its short causal convolution
//               (n_embd_r = (d_conv - 1) * n_conv_channels floats), and
//   ssm state   the selective-scan state h (n_embd_s = d_state * d_inner floats).
// The sizes come from the architecture's hyper-parameters (the model computes them; this class
// only stores floats). Their layout inside the n_embd_r / n_embd_s floats is the model's
// business (src/model/mamba2.cc documents it).
//
// Cells. Sequence s owns cell s (n_seq_max cells, allocated once): one row of state holding every
// held layer's conv and ssm state. A cell holds the state after positions [pos_min, pos_max] of
// its sequence; an empty sequence (pos_max == -1) holds no data: the first ubatch of a sequence
// starts from zeros (apply() clears the cell). ("Slot" in this project means a server slot.)
//
// Checkpoints. With checkpoint_interval = N > 0, the state of a sequence is snapshotted after
// positions N - 1, 2N - 1, ...: init_batch cuts ubatches so that one starts at every multiple of
// N, and apply() of a ubatch starting at p (p % N == 0) copies the cell (the state after p - 1)
// into one of the sequence's n_checkpoints checkpoint cells, replacing the oldest when all are
// taken. Memory is bounded: n_seq_max * n_checkpoints snapshots, allocated up front.
//
// Sequence operations (every one checks its arguments first and changes nothing on error):
//   seq_rm(s, p0, p1)   a range covering all of s's positions empties s (also drops its
//                       checkpoints); a range past pos_max does nothing; a tail [p0, end) with
//                       pos_min < p0 <= pos_max restores s's newest checkpoint at or before
//                       p0 - 1 (pos_max becomes that checkpoint's position, possibly < p0 - 1:
//                       plan_truncate says how far) and drops the newer ones, or fails with
//                       kOutOfRange when there is none; a head or middle range fails with
//                       kNotSupported (a state cannot forget its first tokens).
//   seq_cp(src, dst, p0, p1)  overwrites dst with src: state, positions and checkpoints. A range
//                       ending before src's pos_max copies src's newest checkpoint at or before
//                       p1 - 1 instead (kOutOfRange when there is none); p0 must be <= pos_min.
//   seq_keep(s)         empties every other sequence.
//   seq_add / seq_div   relabel positions (a Mamba state does not depend on them): only a range
//                       covering all of s's positions (or none of them) is allowed; the
//                       checkpoints move along. kInvalidArgument if a position would become < 0.
//   seq_pos_min(s)      the first position s's state has read (-1 when empty).
//   seq_pos_max(s)      the last one (-1 when empty).
//   plan_truncate(s, p) keep = p when nothing past p is held, else one past the newest
//                       checkpoint at or before p - 1, else 0.
//
// Speculative states. With n_spec = S > 0, a transaction also keeps, per sequence, the state after
// each of its output rows except the sequence's last row in the batch (that state is the cell),
// the last S of them: speculative decoding verifies drafted tokens with an output on every row,
// and rolling a rejected tail back is then a copy. They live in S more cells per sequence
// (replacing the oldest) and count as checkpoints for seq_rm, seq_cp and plan_truncate; they are
// not saved in state files. The forward pass writes them: for_segments() runs a layer's kernels
// in segments that end at each such row and copies the state after it. They are a cache of
// recent states: a transaction that rolls back drops those it overwrote (the others, and
// everything else, come back byte-equal), so their bytes are never copied aside.
//
// Transactions (invariants 1 and 2 of memory.h). init_batch validates (one sequence per row),
// splits with split_seq (one sequence per ubatch, cut at checkpoint boundaries) and always fits:
// states are preallocated. apply() of a ubatch saves, the first time the transaction touches a
// sequence, its cell bytes and metadata, and the bytes of any occupied checkpoint cell before it
// is replaced; rollback() restores them, so cell bytes, checkpoint bytes of every live checkpoint
// and metadata come back byte-equal (speculative states: see above). The forward pass writes the cell in place after apply().
//
// Lifetime: created by RecurrentMemory::create as a std::unique_ptr; neither copyable nor movable
// (contexts keep a pointer); copy() deep-copies. Single-threaded (the server loop owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/buffer.h"
#include "memory/planned_context.h"
#include "mnemo/batch.h"
#include "mnemo/memory.h"
#include "mnemo/state_format.h"
#include "mnemo/ubatch.h"

namespace mnemo {

class RecurrentMemory;
struct RsJournal;

struct RecurrentMemoryConfig {
  uint32_t n_seq_max = 1;          // sequences [0, n_seq_max), <= kMaxSeq; one cell each
  std::vector<uint32_t> n_embd_r;  // [n_layer] conv state floats per sequence of each layer
  std::vector<uint32_t> n_embd_s;  // [n_layer] ssm state floats per sequence of each layer
  /// Which model layers are recurrent (null: all). Held layers need n_embd_r + n_embd_s > 0.
  std::function<bool(uint32_t il)> layer_filter;
  /// N: snapshot each sequence after positions N - 1, 2N - 1, ... (0: no checkpoints).
  uint32_t checkpoint_interval = 0;
  /// Checkpoints kept per sequence, newest first survive (0: none). Memory: n_seq_max *
  /// n_checkpoints * (sum of n_embd_r + n_embd_s over held layers) * 4 bytes.
  uint32_t n_checkpoints = 0;
  /// S: speculative states kept per sequence (see the header comment; 0: none). Memory:
  /// n_seq_max * n_spec * (sum of n_embd_r + n_embd_s over held layers) * 4 bytes.
  uint32_t n_spec = 0;
};

/// Which state of a recurrent layer RecurrentMemoryContext::for_segments copies.
enum class RsPart : uint8_t { kConv, kSsm };

/// The transaction returned by RecurrentMemory::init_batch / init_full (see MemoryContext for the
/// protocol). Between apply() and the next apply() / rollback(), the forward pass reads and
/// writes the state of the current ubatch's sequence through conv_state() / ssm_state().
class RecurrentMemoryContext final : public PlannedContext {
 public:
  enum class Mode : uint8_t { kBatch, kFull };
  ~RecurrentMemoryContext() override;

  // MemoryContext (ubatches, ubatch_index, ubatch, next: PlannedContext).
  Status apply() override;
  void rollback() override;
  const RecurrentMemoryContext* rs_for_layer(uint32_t il) const override;

  Mode mode() const { return mode_; }
  const RecurrentMemory& state() const { return *state_; }
  /// The sequence of the current ubatch (split_seq: one per ubatch).
  SeqId seq() const;
  /// The current sequence's conv state of layer il: [n_embd_r(il)] floats, read and written in
  /// place by the forward pass (after apply()). il must be held.
  float* conv_state(uint32_t il) const;
  /// The current sequence's ssm state of layer il: [n_embd_s(il)] floats (as conv_state).
  float* ssm_state(uint32_t il) const;
  /// Runs fn(b, e) over the current ubatch's tokens [0, T) in order: once over [0, T) when no
  /// speculative state is kept in this ubatch, else in segments each ending after a row whose
  /// state is kept, copying layer il's `part` state (the cell, as fn left it) into that row's
  /// speculative cell after its segment. fn must advance the state over tokens [b, e) exactly
  /// as one call over [0, T) would (the recurrence is token by token: docs/numerics.md).
  void for_segments(uint32_t il, RsPart part, int64_t T,
                    const std::function<void(int64_t b, int64_t e)>& fn) const;

 private:
  friend class RecurrentMemory;
  RecurrentMemoryContext(RecurrentMemory* state, Mode mode,
                         MemoryStatus status = MemoryStatus::kSuccess, std::string message = {});

  RecurrentMemory* state_;
  Mode mode_;
  std::unique_ptr<RsJournal> journal_;
  // Per ubatch, the rows whose state is kept (speculative states), ascending.
  std::vector<std::vector<uint32_t>> spec_rows_;
  // The current ubatch's kept rows and their speculative cells (set by apply()).
  std::vector<std::pair<uint32_t, float*>> cur_spec_;
  uint32_t n_applied_ = 0;
  uint64_t epoch_ = 0;
  bool spent_ = false;
};

class RecurrentMemory final : public Memory {
 public:
  /// Validates `config` (kInvalidArgument naming the field: n_seq_max outside [1, 256],
  /// mismatched layer vectors, a held layer with no state, no held layer, checkpoint_interval
  /// without n_checkpoints or the reverse) and allocates the cells (kNoSpace when the OS refuses).
  static Result<std::unique_ptr<RecurrentMemory>> create(RecurrentMemoryConfig config);
  /// Deep copy: metadata, cells, checkpoints.
  Result<std::unique_ptr<RecurrentMemory>> copy() const;
  ~RecurrentMemory() override;

  // Memory (semantics in the header comment).
  using Memory::init_batch;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                            const BatchLimits& limits) override;
  /// Nothing to reserve (states are preallocated): a context with no ubatch.
  std::unique_ptr<MemoryContext> init_full() override;
  /// Always kNoUpdate (positions carry no rotation).
  std::unique_ptr<MemoryContext> init_update() override;
  Status seq_rm(SeqId seq, Pos p0, Pos p1) override;
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  Status seq_keep(SeqId seq) override;
  Status seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  Status seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) override;
  Pos seq_pos_min(SeqId seq) const override;
  Pos seq_pos_max(SeqId seq) const override;
  Result<TruncatePlan> plan_truncate(SeqId seq, Pos p) const override;
  void clear() override;
  /// Per held layer: tensor 'R' (conv) and 'S' (ssm), f32, n_embd floats x n_seq_max rows, part
  /// "rs"; checkpoints as part "rs_ckpt" with n_seq_max * n_checkpoints rows. One stream per
  /// part; used = sequences (or checkpoints) holding data.
  MemoryBreakdown breakdown() const override;
  /// No K/V cells (cells = 0, free_cells kUnbounded); bytes = seq's cell and its n_checkpoints
  /// checkpoint cells: (1 + n_checkpoints) * n_floats_per_seq() * 4 (see Memory::seq_info).
  Result<SeqMemoryInfo> seq_info(SeqId seq) const override;
  uint32_t n_seq_max() const override { return config_.n_seq_max; }

  // State save / restore (recurrent_memory_io.cc; protocol in memory.h, bytes in
  // docs/formats/state_recurrent.md): one RSPT part, then per non-empty sequence its RSSQ record
  // and RSDT data, checkpoints included, so a restored sequence can still be cut back. Restore
  // requires the same recurrent layers and state sizes; it keeps the newest min(saved, own
  // n_checkpoints) checkpoints. requantize*: kNotSupported (no K/V; Memory's defaults).
  state_format::MemoryKindId state_kind() const override {
    return state_format::MemoryKindId::kRecurrent;
  }
  Status state_write(StateWriter& w, const StateWriteSpec& spec) const override;
  Status state_read(StateReader& r, const StateReadSpec& spec) override;

  /// Building blocks for HybridMemory, which validates and splits once and plans every child
  /// before committing any: the limits batches are validated with (one sequence per row) ...
  BatchLimits batch_limits(const BatchLimits& base) const;
  /// ... the split (split_seq, cut so a ubatch starts at every checkpoint boundary) ...
  Result<std::vector<Ubatch>> split(const PreparedBatch& batch, uint32_t n_ubatch) const;
  /// ... and the context for already split ubatches (every ubatch one sequence; CHECKed).
  std::unique_ptr<RecurrentMemoryContext> prepare(
      std::shared_ptr<const std::vector<Ubatch>> ubatches);

  /// The Status each sequence operation would return, without doing it.
  Status check_seq_rm(SeqId seq, Pos p0, Pos p1) const;
  Status check_seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) const;
  Status check_seq_keep(SeqId seq) const;
  Status check_seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) const;
  Status check_seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) const;

  const RecurrentMemoryConfig& config() const { return config_; }
  bool holds_layer(uint32_t il) const { return il < layer_off_r_.size() && layer_off_r_[il] >= 0; }
  uint32_t n_embd_r(uint32_t il) const { return config_.n_embd_r[il]; }
  uint32_t n_embd_s(uint32_t il) const { return config_.n_embd_s[il]; }
  /// Floats of one sequence's whole state (all held layers, conv and ssm).
  size_t n_floats_per_seq() const { return n_floats_; }
  /// Sequence seq's conv / ssm state of held layer il (see RecurrentMemoryContext).
  float* conv_state(uint32_t il, SeqId seq) const;
  float* ssm_state(uint32_t il, SeqId seq) const;
  /// Positions of seq's checkpoints, ascending (each: the state after that position).
  std::vector<Pos> checkpoints(SeqId seq) const;
  /// Positions of seq's speculative states, ascending (each: the state after that position).
  std::vector<Pos> spec_states(SeqId seq) const;
  /// Whole-state bytes of seq's cell ([n_floats_per_seq()] floats: held layers in order, conv
  /// then ssm) and of its checkpoint at position `pos` (empty span when there is none).
  std::span<const float> cell(SeqId seq) const;
  std::span<const float> checkpoint(SeqId seq, Pos pos) const;
  /// Whole-state bytes of seq's speculative state after `pos` (empty span when there is none).
  std::span<const float> spec_state(SeqId seq, Pos pos) const;
  /// Changes on every mutation (contexts check it to catch interleaved use).
  uint64_t epoch() const { return epoch_; }

 private:
  friend class RecurrentMemoryContext;
  friend struct RsJournal;
  struct Checkpoint {
    Pos pos = -1;
    uint32_t cell = 0;  // index into the checkpoint pool
  };
  struct SeqMeta {
    Pos pos_min = -1;
    Pos pos_max = -1;
    std::vector<Checkpoint> ckpts;  // ascending pos
    std::vector<Checkpoint> spec;   // ascending pos; cell: index into the speculative pool
  };
  // A saved state of a sequence: its position and bytes ([n_floats]).
  struct SavedState {
    Pos pos = -1;
    float* data = nullptr;
  };

  RecurrentMemory(RecurrentMemoryConfig config, std::vector<int64_t> off_r,
                  std::vector<int64_t> off_s, size_t n_floats, AlignedBuffer cells,
                  AlignedBuffer ckpt_pool, AlignedBuffer spec_pool);

  Status check_seq(SeqId seq, const char* op, const char* what) const;
  float* cell_ptr(SeqId seq) const;
  float* ckpt_ptr(uint32_t pool_cell) const;
  float* spec_ptr(uint32_t pool_cell) const;
  // A cell of a sequence's pool cells [first, first + n) for a new entry of `list` (ascending
  // pos, n >= 1): a free one, else the oldest entry's, which is removed (*evicted = true).
  static uint32_t take_cell(std::vector<Checkpoint>& list, uint32_t first, uint32_t n,
                            bool* evicted);
  // The newest checkpoint or speculative state of seq at or before pos (data null: none).
  SavedState find_checkpoint(SeqId seq, Pos pos) const;
  // Per ubatch of a transaction, the rows whose speculative state is kept.
  std::vector<std::vector<uint32_t>> plan_spec_rows(const std::vector<Ubatch>& ubs) const;
  // Takes speculative cells for the rows of ubatch `ub` (journaled): (row, cell bytes).
  std::vector<std::pair<uint32_t, float*>> take_spec(const Ubatch& ub,
                                                     const std::vector<uint32_t>& rows,
                                                     RsJournal* journal);
  // Empties seq (metadata only; cell bytes are left as they are).
  void reset_seq(SeqId seq);
  // One ubatch's commit (journaled): see the header comment.
  void apply_ubatch(const Ubatch& ub, RsJournal* journal);
  void undo(RsJournal* journal);

  RecurrentMemoryConfig config_;
  std::vector<int64_t> layer_off_r_;  // [n_layer] float offset of layer il's conv state, -1
  std::vector<int64_t> layer_off_s_;  // [n_layer] float offset of layer il's ssm state, -1
  size_t n_floats_ = 0;               // floats per sequence state
  AlignedBuffer cells_;               // [n_seq_max x n_floats] f32
  AlignedBuffer ckpt_pool_;           // [n_seq_max * n_checkpoints x n_floats] f32
  AlignedBuffer spec_pool_;           // [n_seq_max * n_spec x n_floats] f32
  std::vector<SeqMeta> seqs_;         // [n_seq_max]
  uint64_t epoch_ = 0;
};

}  // namespace mnemo
