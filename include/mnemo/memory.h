// Memory: the interface every implementation of a model's memory offers (KV cache, SWA KV cache,
// recurrent state, hybrid), and MemoryContext, the per-batch transaction
// (docs/design.md §1 and §3).
//
// The decode loop (one thread owns the memory; nothing here is thread-safe):
//
//   auto upd = memory.init_update();            // pending position shifts, if any
//   if (upd->status() == MemoryStatus::kSuccess) { re-rotate K (see KvCacheContext::shifts());
//                                                  upd->apply(); }
//   auto ctx = memory.init_batch(batch, n_ubatch, limits);
//   if (ctx->status() != MemoryStatus::kSuccess) -> report ctx->message(); memory unchanged
//   do {
//     ctx->apply();                             // commit this ubatch's cells (journaled)
//     forward(ctx->ubatch(), ...)               // write K/V rows, attend (views, masks)
//     if (failed or aborted) { ctx->rollback(); break; }   // memory exactly as before init_batch
//   } while (ctx->next());
//
// Invariants (docs/design.md §3.7, pinned by the tests in src/memory/*_test.cc):
//   1. init_batch either returns a context whose every ubatch fits, or fails and changes nothing.
//   2. After rollback() the memory equals its state before init_batch: cell metadata byte-equal,
//      and the K/V bytes of every occupied cell byte-equal (apply() saves the rows of occupied
//      cells it reuses). Rows of empty cells hold no data and are not restored.
//   3. A cell is reused only if every sequence in it masks it: causally (the same sequence, cell
//      pos >= the new token's pos) or by the sliding window (outside its owner's window as seen
//      from that owner's next position, oldest position first).
//
// Sequence operations. Positions are half-open ranges [p0, p1); a negative p0 means "from the
// start", a negative p1 "to the end". Outside input (an out-of-range seq_id, a bad divisor, a
// position overflow, no room) returns an error Status and changes nothing.
//
//   seq_rm(seq, p0, p1)         remove seq from the cells with pos in [p0, p1); a cell left with
//                               no sequence becomes empty. seq < 0: every sequence.
//   seq_cp(src, dst, p0, p1)    make dst also hold src's positions in [p0, p1). Unified cache:
//                               dst joins src's cells (shared, no copy). Split cache: cells of
//                               dst's stream get copies of the K/V rows (converted when the
//                               streams' K/V types differ), pos and pending shift; any range.
//   seq_keep(seq)               remove every other sequence from every cell.
//   seq_add(seq, p0, p1, delta) pos += delta for seq's cells in [p0, p1), recording the shift for
//                               RoPE re-rotation (init_update); a cell whose pos becomes < 0 is
//                               emptied. In a unified cache a cell shared with other sequences
//                               moves for all of them (it has one position).
//   seq_div(seq, p0, p1, d)     pos = pos / d (integer division, d >= 1) for seq's cells in
//                               [p0, p1), recording the shift as seq_add does.
//   seq_pos_min(seq)            lowest position of seq held, -1 when none (or seq out of range).
//   seq_pos_max(seq)            highest position of seq held, -1 when none (or seq out of range).
//
//   seq_info(seq)               what serves seq: whether attention K/V does, its stream, that
//                               stream's K/V types, cells held and free, bytes (see below).
//
// Costs: every sequence operation is O(cells touched * log n); seq_pos_min / seq_pos_max are O(1).
//
// --- recurrent memory (RecurrentMemory, HybridMemory: src/memory/recurrent_memory.h) ---------
// A recurrent layer keeps one fixed-size state per sequence that summarizes every token read so
// far; it cannot forget a suffix. Such memories honour seq_rm of a tail only by restoring a
// checkpoint (a snapshot of the state taken every N tokens), which may cut the sequence further
// back than asked; a head or middle range cannot be removed at all. To truncate without guessing:
//
//   plan_truncate(seq, p)       "can I keep positions [0, p) of seq, and how many tokens must I
//                               decode again?": TruncatePlan{keep, n_redo}. keep <= p is where
//                               decoding resumes; seq_rm(seq, keep, -1) then succeeds and leaves
//                               seq_pos_max(seq) == keep - 1; the caller re-decodes [keep, p)
//                               (n_redo = p - keep tokens). keep == 0: nothing can be kept.
//                               Attention-only memories keep every position: keep = min(p, end).
// ----------------------------------------------------------------------------------------------
//
// --- state save / restore and requantization (include/mnemo/state.h, docs/formats/state.md) ---
// The hooks below are what state.cc calls; implementations own their part of the format.
//
//   state_kind()            HEAD.memory_kind of this memory (state_format::MemoryKindId);
//                           kNone: the memory cannot save its state (the hooks' defaults).
//   state_write(w, spec)    writes this memory's sections, the ones between HEAD and TOKN (KvCache:
//                           KVPT, then per stream block KVCL and one KVLY per held layer).
//                           spec.scope kWhole: every sequence; kSequence: spec.seq only. Changes
//                           nothing; lengths are computed before each section; the same memory
//                           gives the same bytes. With w.counts_only() it may skip() data bytes.
//   state_read(r, spec)     reads back exactly those sections. state.cc calls it twice over the
//                           same bytes: (1) spec.dry_run = true: parse and validate everything
//                           (structure, checksums through r.end_section(), layers and widths,
//                           types, positions, seq ids, room at the destination) and change
//                           NOTHING; (2) only when the whole state validated (TOKN and DONE too),
//                           dry_run = false: apply. kSequence: the cells replace those of
//                           spec.dst_seq (any seq_id; spec.src_seq is the id recorded);
//                           kWhole: the state replaces the whole memory. Step (2) can fail only
//                           if the source changed between the passes (a file rewritten
//                           meanwhile); the memory must then stay consistent, with the
//                           destination sequence (kWhole: every sequence) emptied, and the error
//                           must say so.
//   requantize(k, v)        every stream to new K/V types without re-processing any prompt: rows
//                           converted (dequantize, re-rotate if the rotation changes, quantize),
//                           stream by stream and layer by layer, old buffers released.
//   requantize_seq(s, k, v) only the stream that holds sequence s; a memory whose stream is shared
//                           by several sequences (unified KvCache) returns kInvalidArgument.
// Memories without K/V (recurrent state) return kNotSupported from requantize*; a hybrid
// requantizes its attention part.
// ----------------------------------------------------------------------------------------------
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/quant.h"
#include "mnemo/state_format.h"
#include "mnemo/status.h"
#include "mnemo/ubatch.h"

namespace mnemo {

class KvCacheContext;
class StateWriter;             // include/mnemo/state_io.h
class StateReader;             // include/mnemo/state_io.h
struct StateWriteSpec;         // include/mnemo/state_io.h
struct StateReadSpec;          // include/mnemo/state_io.h
class RecurrentMemoryContext;  // src/memory/recurrent_memory.h

/// Outcome of preparing or running a memory transaction (a capacity outcome; docs/contributing.md).
enum class MemoryStatus : uint8_t {
  kSuccess = 0,    // the context is ready
  kNoUpdate,       // init_update: nothing to do
  kFailedPrepare,  // the batch does not fit (no space); nothing changed
  kFailedCompute,  // the forward pass failed (set by the decode loop, not by the memory)
  kInvalidBatch,   // the batch failed validation (message names the row); nothing changed
};

/// "success", "no_update", "failed_prepare", "failed_compute", "invalid_batch".
std::string_view memory_status_name(MemoryStatus s);

/// One transaction over a memory: the ubatches of one batch (init_batch), a worst-case view
/// (init_full) or pending shifts (init_update). A context refers to the memory that made it,
/// which must outlive it; while a context has applied ubatches, no other mutation of that memory
/// may happen until the context is done (CHECKed: apply() and rollback() verify it).
///
/// This base class is also the whole of a failed context: status() says why, there is no ubatch,
/// next() returns false and apply() returns the failure.
class MemoryContext {
 public:
  MemoryContext(MemoryStatus status, std::string message)
      : status_(status), message_(std::move(message)) {}
  virtual ~MemoryContext() = default;
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;

  MemoryStatus status() const { return status_; }
  /// Why the context failed; empty on success.
  const std::string& message() const { return message_; }
  bool ok() const { return status_ == MemoryStatus::kSuccess; }

  /// All ubatches of the transaction, in processing order (empty for full / update contexts).
  virtual std::span<const Ubatch> ubatches() const { return {}; }
  /// Index of the current ubatch in ubatches().
  virtual uint32_t ubatch_index() const { return 0; }
  /// The current ubatch (an empty one when there is none).
  virtual const Ubatch& ubatch() const;
  /// Moves to the next ubatch; false when there is none left.
  virtual bool next() { return false; }
  /// Commits the current ubatch's cell metadata (or, for an update context, clears the applied
  /// shifts). The only call that mutates the memory. Each ubatch is applied once, in order.
  virtual Status apply();
  /// Undoes everything this context applied, newest first: the memory returns to its state at
  /// init_*. Safe to call when nothing was applied. Afterwards the context is spent.
  virtual void rollback() {}

  /// The KV context that governs attention layer il (views, placement, masks), or nullptr when
  /// the memory holds no K/V for that layer.
  virtual const KvCacheContext* kv_for_layer(uint32_t il) const { return nullptr; }
  /// The recurrent-state context that governs recurrent layer il (conv / ssm state of the current
  /// ubatch's sequence), or nullptr when the memory holds no state for that layer.
  virtual const RecurrentMemoryContext* rs_for_layer(uint32_t il) const { return nullptr; }

 private:
  MemoryStatus status_;
  std::string message_;
};

/// Exact storage accounting of a memory (bytes of K/V tensors and of their mappings).
struct MemoryBreakdown {
  struct Tensor {
    std::string part;    // which child: "kv" (KvCache), "kv_base" / "kv_swa" (SwaKvCache)
    uint32_t layer = 0;  // model layer index
    uint32_t stream = 0;
    char kind = 'K';  // 'K' or 'V'
    GgmlType type = GgmlType::F16;
    uint32_t n_embd = 0;   // elements per row
    uint32_t n_cells = 0;  // rows
    size_t bytes = 0;      // n_cells * row_size(type, n_embd)
  };
  struct Stream {
    std::string part;
    uint32_t stream = 0;
    uint32_t n_cells = 0;
    uint32_t used = 0;  // occupied cells
    uint32_t free = 0;  // n_cells - used
    GgmlType k_type = GgmlType::F16;
    GgmlType v_type = GgmlType::F16;
    uint32_t rotation = 0;    // Hadamard rotation of the stored rows (kv_rotation.h); 0 = none
    size_t tensor_bytes = 0;  // sum of this stream's tensors
    size_t mapped_bytes = 0;  // bytes mapped from the OS for them (page-rounded, aligned)
  };
  std::vector<Tensor> tensors;
  std::vector<Stream> streams;
  size_t tensor_bytes = 0;
  size_t mapped_bytes = 0;

  /// Appends one stream and its tensors: each tensor takes the stream's part, stream index and
  /// n_cells, the stream's tensor_bytes is set to the sum of their bytes, and the totals grow by
  /// the stream's tensor and mapped bytes.
  void add_stream(Stream stream, std::vector<Tensor> stream_tensors);
  /// A readable table: one line per stream, then totals.
  std::string to_string() const;
};

/// What serves one sequence in a memory: the answer of Memory::seq_info. Enough for a caller
/// (the server) to admit a prompt and to account for a sequence without knowing which kind of
/// memory it runs on, nor how its streams and children are laid out.
struct SeqMemoryInfo {
  /// free_cells of a memory without cells: a recurrent state is preallocated per sequence and
  /// never runs out of room.
  static constexpr uint32_t kUnbounded = UINT32_MAX;

  SeqId seq_id = 0;
  bool has_kv = false;  // attention K/V serves seq_id (false: a recurrent state alone)
  uint32_t stream = 0;  // has_kv: the K/V stream holding seq_id (unified 0, split seq_id)
  GgmlType k_type = GgmlType::F16;   // has_kv: that stream's K type; unspecified otherwise
  GgmlType v_type = GgmlType::F16;   // has_kv: that stream's V type; unspecified otherwise
  uint32_t cells = 0;                // cells of that stream holding seq_id; 0 when !has_kv
  uint32_t free_cells = kUnbounded;  // empty cells of that stream: room for new tokens, shared
                                     // with the stream's other sequences in unified mode
  size_t bytes = 0;                  // tensor bytes serving seq_id (see Memory::seq_info)
};

/// Answer of Memory::plan_truncate (see "recurrent memory" at the top of this header).
struct TruncatePlan {
  Pos keep = 0;         // positions [0, keep) survive seq_rm(seq, keep, -1); decoding resumes here
  uint32_t n_redo = 0;  // p - keep: tokens the caller must decode again to reach position p
};

/// The memory interface. Implementations are owned through std::unique_ptr and are neither
/// copyable nor movable (contexts keep a pointer to them); an explicit copy() exists where a
/// deep copy is needed.
class Memory {
 public:
  Memory() = default;
  virtual ~Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  /// Validates `batch` (limits.n_seq_max and limits.allow_multi_seq_rows are set by the memory),
  /// splits it into ubatches of at most n_ubatch rows and proves every ubatch fits. Returns a
  /// context with status kSuccess, or kInvalidBatch / kFailedPrepare with a message; on failure
  /// nothing changed. Nothing changes until the context's apply().
  virtual std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                                    const BatchLimits& limits) = 0;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch) {
    return init_batch(batch, n_ubatch, BatchLimits{});
  }
  /// A context that simulates a full memory (every cell in use: n_kv = n_cells) so the caller
  /// can reserve worst-case compute buffers. Has no ubatch; apply() changes nothing.
  virtual std::unique_ptr<MemoryContext> init_full() = 0;
  /// A context for pending position shifts: kNoUpdate when there are none, else kSuccess with
  /// the list of shifted cells; its apply() clears the shifts (rollback() restores them).
  virtual std::unique_ptr<MemoryContext> init_update() = 0;

  // Sequence operations: semantics in the block at the top of this header.
  virtual Status seq_rm(SeqId seq, Pos p0, Pos p1) = 0;
  virtual Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) = 0;
  virtual Status seq_keep(SeqId seq) = 0;
  virtual Status seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) = 0;
  virtual Status seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) = 0;
  virtual Pos seq_pos_min(SeqId seq) const = 0;
  virtual Pos seq_pos_max(SeqId seq) const = 0;
  /// How far seq can be cut back to keep positions [0, p), without changing anything. Errors:
  /// kInvalidArgument for seq outside [0, n_seq_max) or p < 0. The default suits memories that
  /// keep every position (KvCache); recurrent memories override it.
  virtual Result<TruncatePlan> plan_truncate(SeqId seq, Pos p) const {
    if (seq < 0 || static_cast<uint32_t>(seq) >= n_seq_max() || p < 0) {
      return Status::invalid_argument("plan_truncate: seq_id " + std::to_string(seq) +
                                      " or position " + std::to_string(p) + " is out of range");
    }
    const Pos keep = std::min<Pos>(p, seq_pos_max(seq) + 1);
    return TruncatePlan{keep, static_cast<uint32_t>(p - keep)};
  }

  /// What serves sequence `seq`, without changing anything (SeqMemoryInfo). Per memory:
  ///   KvCache         has_kv; stream = stream_of(seq); cells = cells of the stream holding seq
  ///                   (a cell shared by several sequences counts for each); free_cells = the
  ///                   stream's empty cells; bytes = split mode: the stream's K and V tensor
  ///                   bytes (every layer); unified mode: seq's share of them by cells held,
  ///                   floor(stream bytes * cells / n_ctx).
  ///   SwaKvCache      stream, types, cells and free_cells of the base (full-attention) child,
  ///                   which bounds what a sequence can hold; bytes = the base child's plus the
  ///                   SWA child's, each counted as a KvCache counts them.
  ///   RecurrentMemory !has_kv; cells = 0 (no K/V cells); free_cells = kUnbounded; bytes = seq's
  ///                   own state cell and its n_checkpoints checkpoint cells (preallocated, so
  ///                   the same for every sequence, empty or not; over all sequences they sum to
  ///                   breakdown().tensor_bytes).
  ///   HybridMemory    the KV child's answer, with bytes = the KV child's + the recurrent
  ///                   child's.
  /// In split mode (and for recurrent states) the bytes of all sequences sum to
  /// breakdown().tensor_bytes. Cost: O(n_layer). Errors: kInvalidArgument for seq outside
  /// [0, n_seq_max).
  virtual Result<SeqMemoryInfo> seq_info(SeqId seq) const = 0;

  /// Whether sequence `seq`'s cells, rows and their bookkeeping are its own: no operation on
  /// another sequence (a decoded batch, seq_rm / seq_cp / seq_add between others, requantize_seq
  /// of another) reads or writes them. Then a state_write of scope kSequence for `seq` may run
  /// on another thread while this one goes on with the other sequences, provided nothing
  /// changes `seq` itself, nor the memory as a whole (requantize, clear, state_read), until it
  /// returns; the server stashes a finished slot so (docs/design.md §3.9). Per memory: KvCache
  /// in split mode (one stream per sequence) true, unified false; SwaKvCache: both children;
  /// RecurrentMemory and HybridMemory false (their decode passes every sequence's state cells
  /// through shared bookkeeping). Cost: O(1). false for seq outside [0, n_seq_max).
  virtual bool seq_isolated(SeqId seq) const { return false; }

  /// Empties every cell of every sequence (storage stays allocated).
  virtual void clear() = 0;
  /// Exact bytes per layer, stream and K/V type; cells used / free per stream.
  virtual MemoryBreakdown breakdown() const = 0;
  virtual uint32_t n_seq_max() const = 0;

  // State save / restore and requantization: contracts in the block at the top of this header.
  virtual state_format::MemoryKindId state_kind() const {
    return state_format::MemoryKindId::kNone;
  }
  virtual Status state_write(StateWriter& w, const StateWriteSpec& spec) const {
    return Status::not_supported("this memory cannot save its state");
  }
  virtual Status state_read(StateReader& r, const StateReadSpec& spec) {
    return Status::not_supported("this memory cannot restore a state");
  }
  virtual Status requantize(GgmlType k_type, GgmlType v_type) {
    return Status::not_supported("this memory holds no K/V to requantize");
  }
  virtual Status requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) {
    return Status::not_supported("this memory holds no K/V to requantize");
  }
};

}  // namespace mnemo
