// KvCache: the KV cache of attention layers (docs/design.md §3.2), and KvCacheContext, its
// per-batch transaction. Semantics of the sequence operations: include/mnemo/memory.h.
//
// Streams. A unified cache has one stream of n_ctx cells shared by all sequences (a cell may
// belong to several sequences: shared prefixes; seq_cp only adds membership). A split cache
// (the default) has n_stream = n_seq_max streams of n_ctx cells each; sequence s lives in stream
// s, so attention never scans another sequence's cells. In split mode a batch row must belong to
// exactly one sequence (validation rejects shared rows: copy a prefix with seq_cp instead), and
// seq_cp across streams copies K/V rows for any position range, converting types if needed.
//
// Storage: src/memory/kv_storage.h (per layer per stream, rows per cell, own types per
// stream). Bookkeeping: src/memory/kv_cells.h (one KvCells per stream).
//
// find_slot (placement of one ubatch's rows in one stream), run by init_batch for every ubatch
// before anything changes: starting at the stream's head, cells are taken in order, wrapping
// around, if they are empty or every sequence in them masks them for the new row (invariant 3 in
// memory.h): the row's own sequence at a position >= the row's (causal), or a cell outside the
// sliding window of its owner as seen from the owner's next position (pos_max + 1 before this
// ubatch), evicted oldest first (the cell's pos must be the owner's current seq_pos_min, so
// eviction never leaves a hole in a sequence's positions). When the first n cells from head all
// qualify the placement is contiguous (the fast path); otherwise it is scattered. If the sweep
// comes up short, each sequence's oldest cells are evicted directly while they qualify (the
// sweep may have passed them before they became the oldest). Cost per ubatch: O(cells
// scanned), which is O(n_tokens) while the stream has room after head.
//
// Masks (per ubatch and stream, after apply()): a row at pos p of sequence s must not attend to
// cell c when c is empty, c does not hold s (cross-sequence isolation), pos(c) > p (causal), or
// the window hides it: standard SWA pos(c) <= p - n_swa, chunked pos(c) < (p / n_swa) * n_swa.
// A row of several sequences (unified mode) attends as its first (primary) sequence. Masks use
// the cells' current positions: after seq_add / seq_div, run init_update (re-rotate K) first.
//
// Lifetime: created by KvCache::create as a std::unique_ptr; neither copyable nor movable
// (contexts keep a pointer); copy() deep-copies. Single-threaded (the server loop owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "memory/kv_cells.h"
#include "memory/kv_storage.h"
#include "memory/planned_context.h"
#include "mnemo/batch.h"
#include "mnemo/memory.h"
#include "mnemo/quant.h"
#include "mnemo/state_format.h"
#include "mnemo/swa.h"
#include "mnemo/thread_pool.h"
#include "mnemo/ubatch.h"

namespace mnemo {

struct KvJournal;
class KvCache;
class KvPartReader;  // kv_cache_io.cc: state restore of one KVPT part

/// What a K/V cache holds: cells per stream, sequences and streams, the K/V types, and the row
/// widths of every model layer. The start of every KvCacheConfig; MemoryParams (make_memory.h)
/// carries one, which make_memory hands to each cache it makes.
struct KvCacheShape {
  uint32_t n_ctx = 0;      // cells per stream
  uint32_t n_seq_max = 1;  // sequences [0, n_seq_max); <= kMaxSeq
  bool unified = false;    // true: 1 stream for all sequences; false: 1 stream per sequence
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  std::vector<uint32_t> n_embd_k_gqa;  // [n_layer] K row width (elements) of each model layer
  std::vector<uint32_t> n_embd_v_gqa;  // [n_layer] V row width
  /// V head size (elements): > 0 lets layers of several K/V heads store V per head (V planes,
  /// kv_storage.h); 0 keeps V as rows. Only the layout in memory differs, never a row's bytes.
  uint32_t head_dim_v = 0;
};

/// A KvCache: its shape (KvCacheShape: n_ctx, n_seq_max, unified, k_type / v_type, row widths)
/// and how it serves the layers it holds.
struct KvCacheConfig : KvCacheShape {
  KvCacheConfig() = default;
  explicit KvCacheConfig(KvCacheShape shape) : KvCacheShape(std::move(shape)) {}

  /// Optional [n_stream] per-stream K/V types overriding k_type / v_type.
  std::vector<KvStorage::StreamTypes> stream_types;
  /// Which model layers this cache holds (null: all). Views exist only for held layers.
  std::function<bool(uint32_t il)> layer_filter;
  SwaType swa_type = SwaType::kNone;  // the window of the held layers (and what find_slot reuses)
  uint32_t n_swa = 0;                 // window size; >= 1 unless swa_type is kNone
  /// find_slot may reuse cells the window hides from every owner. false keeps every position
  /// until seq_rm (SwaKvCache's swa_full: placement then matches a cache without a window).
  bool swa_reuse = true;
  bool causal = true;   // causal attention (false: embeddings-style, no causal mask)
  uint32_t n_pad = 32;  // n_kv is used_max rounded up to this (capped at n_ctx)
  /// Hadamard rotation of stored rows (src/memory/kv_rotation.h): 0 = off; otherwise the
  /// attention head size d (a power of two dividing every row width). Streams whose K or V type
  /// is quantized then store every head rotated by H_d; f32 / f16 / bf16 streams never are.
  uint32_t rotation_dim = 0;
  /// Threads for whole-stream requantization (not owned; must outlive the cache; a Context
  /// passes its own). null: requantization runs on the calling thread alone.
  ThreadPool* pool = nullptr;
};

/// Where the rows of one ubatch that belong to one stream go.
struct StreamSlots {
  uint32_t stream = 0;
  std::vector<uint32_t> rows;   // ubatch row indices, ascending (for split_equal: one sequence)
  std::vector<uint32_t> cells;  // [rows.size()] the cell of each row in the stream
  bool contiguous = false;      // cells[k] == cells[0] + k for all k
};

/// The transaction returned by KvCache::init_batch / init_full / init_update (see MemoryContext
/// for the protocol). Views, placement and masks are what the model's attention needs.
class KvCacheContext final : public PlannedContext {
 public:
  enum class Mode : uint8_t { kBatch, kFull, kUpdate };

  /// Cells with a pending shift in one stream (update contexts).
  struct StreamShifts {
    uint32_t stream = 0;
    std::vector<uint32_t> cells;  // cells whose K must be re-rotated
    std::vector<int32_t> deltas;  // [cells.size()] position delta since K was written / rotated
  };

  ~KvCacheContext() override;

  // MemoryContext (ubatches, ubatch_index, ubatch, next: PlannedContext).
  Status apply() override;
  void rollback() override;
  const KvCacheContext* kv_for_layer(uint32_t il) const override;

  Mode mode() const { return mode_; }
  const KvCache& cache() const { return *cache_; }

  /// Placement of the current ubatch: one entry per stream it touches, ascending by stream.
  const std::vector<StreamSlots>& placement() const;
  /// Attention over stream s scans cells [0, n_kv(s)): used_max rounded up to n_pad, capped at
  /// n_ctx (after apply(); n_ctx for an init_full context).
  uint32_t n_kv(uint32_t stream) const;
  /// K / V views of model layer il in stream s (il must be held by the cache).
  KvRows k_view(uint32_t il, uint32_t stream) const;
  KvRows v_view(uint32_t il, uint32_t stream) const;

  /// Mask predicate, after apply(): true when row k of `slots` (an entry of placement()) must not
  /// attend to `cell` of slots.stream (rules in the header comment).
  bool is_masked(const StreamSlots& slots, uint32_t k, uint32_t cell) const;
  /// Dense mask for placement()[i], after apply(): [rows.size(), n_kv(stream)] row-major floats,
  /// 0 where the row may attend, -INFINITY where it may not. Resizes *out.
  void build_mask(size_t i, std::vector<float>* out) const;
  /// Visiting order for placement()[i], after apply(): the occupied cells of [0, n_kv(stream)),
  /// ascending by position (ties by cell index). Attention visits a row's cells in this order
  /// (kernels::KvView::order), so its result depends on the positions a sequence holds, not on
  /// where in the cache they lie (unified or split, ring reuse of a sliding window, restores).
  /// O(n_kv), or O(n_kv log n_kv) when the cells are not already in position order. Resizes *out.
  void build_order(size_t i, std::vector<int32_t>* out) const;

  /// Update contexts: the streams with pending shifts (empty otherwise).
  const std::vector<StreamShifts>& shifts() const { return shifts_; }

  // ---- What the model reads and writes (llama.cpp's cpy_k / cpy_v / get_k / get_v, in our
  // terms). The memory owns the bytes: how a row is stored (K/V type, Hadamard rotation) stays
  // here; the model hands over float rows and receives views. After apply(), for the current
  // ubatch.

  /// Writes layer il's K and V rows of the current ubatch into the cells the placement chose:
  /// k [T x n_embd_k_gqa], v [T x n_embd_v_gqa] floats in ubatch row order (T = ubatch size),
  /// each row converted to its stream's K / V type (byte-identical to quant's quantize_row), per
  /// head Hadamard-rotated first where the stream stores rotated rows. A rollback of this
  /// context restores the rows it overwrote (the journal saved them at apply()).
  void store_kv(uint32_t il, const float* k, const float* v) const;

  /// What attention over placement()[i] reads in layer il; valid until the next ubatch.
  struct AttentionInput {
    kernels::KvView kv;           // K and V rows of cells [0, n_kv) and the visiting order
    const float* mask = nullptr;  // [rows x n_kv]: 0 or -inf (build_mask)
    int64_t mask_stride = 0;      // n_kv
    uint32_t rotation = 0;        // 0, or the head size d: stored rows are rotated by H_d, so Q
                                  // must be rotated per head before and the output after
                                  // (hadamard_rotate, kv_rotation.h)
  };
  /// The K/V view, mask and visiting order (build_order) of placement()[i] for layer il; mask
  /// and order are built once per ubatch and shared by the layers.
  AttentionInput attention_input(uint32_t il, size_t i) const;

  /// Update contexts: re-rotates the K rows of layer il's shifted cells by their deltas with
  /// RoPE `p` (rotations compose: kernels::rope_shift), K rows of n_head_kv heads of head_dim.
  /// Rotated streams are un-rotated, shifted and rotated back. Call for every attention layer
  /// before apply(). pool may be null.
  void apply_k_shifts(uint32_t il, const kernels::RopeParams& p, int64_t n_head_kv,
                      int64_t head_dim, ThreadPool* pool) const;

 private:
  friend class KvCache;
  KvCacheContext(KvCache* cache, Mode mode, MemoryStatus status = MemoryStatus::kSuccess,
                 std::string message = {});

  KvCache* cache_;
  Mode mode_;
  std::vector<std::vector<StreamSlots>> placements_;  // [n_ubatches]
  std::vector<StreamShifts> shifts_;
  std::unique_ptr<KvJournal> journal_;
  uint32_t n_applied_ = 0;  // ubatches applied so far (they are applied in order)
  // attention_input's per-ubatch caches: mask and visiting order per placement entry.
  mutable uint32_t inputs_ubatch_ = UINT32_MAX;
  mutable std::vector<std::vector<float>> masks_;
  mutable std::vector<std::vector<int32_t>> orders_;
  uint64_t epoch_ = 0;  // the cache's epoch this context expects (CHECKed)
  bool spent_ = false;  // rolled back; no further apply
};

class KvCache final : public Memory {
 public:
  /// Validates `config` (kInvalidArgument naming the field: n_ctx == 0, n_seq_max outside
  /// [1, 256], mismatched layer vectors, a bad type or row width, n_swa == 0 with a window, ...)
  /// and allocates the storage (kNoSpace when the OS refuses).
  static Result<std::unique_ptr<KvCache>> create(KvCacheConfig config);
  /// Deep copy: cells, storage bytes, types.
  Result<std::unique_ptr<KvCache>> copy() const;
  ~KvCache() override;

  // Memory.
  using Memory::init_batch;
  std::unique_ptr<MemoryContext> init_batch(const Batch& batch, uint32_t n_ubatch,
                                            const BatchLimits& limits) override;
  std::unique_ptr<MemoryContext> init_full() override;
  std::unique_ptr<MemoryContext> init_update() override;
  Status seq_rm(SeqId seq, Pos p0, Pos p1) override;
  Status seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  Status seq_keep(SeqId seq) override;
  Status seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  Status seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) override;
  Pos seq_pos_min(SeqId seq) const override;
  Pos seq_pos_max(SeqId seq) const override;
  void clear() override;
  MemoryBreakdown breakdown() const override;
  /// Stream stream_of(seq): its types, seq's cells, its free cells, and its K/V bytes (unified:
  /// seq's share by cells held); see Memory::seq_info.
  Result<SeqMemoryInfo> seq_info(SeqId seq) const override;
  /// Split mode: every sequence has its own stream (cells, rows, rotation), so true for a
  /// sequence in range; unified mode: false (all sequences share one stream's cells).
  bool seq_isolated(SeqId seq) const override {
    return !config_.unified && seq >= 0 && static_cast<uint32_t>(seq) < config_.n_seq_max;
  }
  uint32_t n_seq_max() const override { return config_.n_seq_max; }

  /// Building blocks for composite memories (SwaKvCache, HybridMemory), which validate
  /// and split once and plan every child before committing any:
  /// the limits this cache validates batches with (n_seq_max, multi-sequence rows) ...
  BatchLimits batch_limits(const BatchLimits& base) const;
  /// ... the split it needs (kEqual in split mode, kSimple in unified mode) ...
  SplitStrategy split_strategy() const;
  /// ... and placement of already split ubatches: a context with kSuccess, or kFailedPrepare
  /// with a message; nothing changes either way.
  std::unique_ptr<KvCacheContext> prepare(std::shared_ptr<const std::vector<Ubatch>> ubatches);

  /// The Status each sequence operation would return, without doing it (composites check every
  /// child before changing any).
  Status check_seq_rm(SeqId seq, Pos p0, Pos p1) const;
  Status check_seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) const;
  Status check_seq_keep(SeqId seq) const;
  Status check_seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) const;
  Status check_seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) const;

  // State save / restore (kv_cache_io.cc) and requantization (kv_requantize.cc); contracts
  // in memory.h, byte layout in docs/formats/state.md.
  state_format::MemoryKindId state_kind() const override {
    return state_format::MemoryKindId::kAttention;
  }
  Status state_write(StateWriter& w, const StateWriteSpec& spec) const override;
  Status state_read(StateReader& r, const StateReadSpec& spec) override;
  /// Unified mode: kInvalidArgument (one stream holds every sequence; use requantize()).
  Status requantize(GgmlType k_type, GgmlType v_type) override;
  Status requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) override;
  /// Building blocks for composites (SwaKvCache, HybridMemory): one KVPT part of a state, tagged
  /// with the child's role; the read checks the role.
  Status state_write_part(StateWriter& w, const StateWriteSpec& spec,
                          state_format::PartRole role) const;
  Status state_read_part(StateReader& r, const StateReadSpec& spec, state_format::PartRole role);
  /// The Status requantize / requantize_seq would return, without doing it (a type the cache
  /// cannot hold, a seq_id out of range, unified mode for requantize_seq).
  Status check_requantize(GgmlType k_type, GgmlType v_type) const;
  Status check_requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) const;
  /// Converts stream s to new types (requantize's unit of work; see KvStorage::convert_stream).
  /// Errors: kNoSpace when the new mapping is refused (the stream is then unchanged).
  Status requantize_stream(uint32_t s, GgmlType k_type, GgmlType v_type);

  /// Whole-cache requantize in two steps, so that a memory made of several caches (SwaKvCache)
  /// maps all of their streams before it changes any. prepare_requantize: the checks of
  /// requantize and every stream's new mapping (kInvalidArgument / kNoSpace; nothing changes);
  /// commit_requantize converts every stream into its mapping and cannot fail.
  struct PreparedRequantize {
    GgmlType k_type = GgmlType::F16;
    GgmlType v_type = GgmlType::F16;
    std::vector<KvStorage::Prepared> streams;  // [n_stream]
  };
  Result<PreparedRequantize> prepare_requantize(GgmlType k_type, GgmlType v_type) const;
  void commit_requantize(PreparedRequantize p);
  /// The rotation rows of these types get in this cache: kv_rotation_for(rotation_dim, k, v).
  uint32_t rotation_for(GgmlType k_type, GgmlType v_type) const;

 private:
  /// The cells of stream s holding data, ascending (what a conversion must carry over).
  std::vector<uint32_t> occupied_cells(uint32_t s) const;
  /// Converts stream s into its prepared mapping (KvStorage::commit_convert); views are
  /// invalidated.
  void commit_stream(KvStorage::Prepared p, uint32_t s);

 public:
  const KvCacheConfig& config() const { return config_; }
  /// One stream shared by all sequences (true) or one per sequence (false).
  bool unified() const { return config_.unified; }
  /// Number of streams: 1 (unified) or n_seq_max (split).
  uint32_t n_stream() const { return static_cast<uint32_t>(cells_.size()); }
  /// Cells per stream.
  uint32_t n_ctx() const { return config_.n_ctx; }
  /// The stream that holds sequence seq (0 in unified mode, seq in split mode).
  uint32_t stream_of(SeqId seq) const { return config_.unified ? 0 : static_cast<uint32_t>(seq); }
  /// Bookkeeping of one stream (read-only: only contexts and sequence operations change it).
  const KvCells& cells(uint32_t stream) const { return cells_[stream]; }
  /// The K/V tensors. Mutable access is for whole-stream operations (requantization, state
  /// restore); rows of occupied cells must keep matching the cells.
  const KvStorage& storage() const { return storage_; }
  KvStorage& storage() { return storage_; }
  /// Whether model layer il is held here; its index into storage() layers.
  bool holds_layer(uint32_t il) const { return il < layer_index_.size() && layer_index_[il] >= 0; }
  uint32_t layer_index(uint32_t il) const;
  /// Views of model layer il (CHECKed to be held) in a stream: [n_embd_{k,v}_gqa(il), n_ctx].
  KvRows k_view(uint32_t il, uint32_t stream) const;
  KvRows v_view(uint32_t il, uint32_t stream) const;
  /// Changes on every mutation (contexts check it to catch interleaved use).
  uint64_t epoch() const { return epoch_; }

 private:
  friend class KvCacheContext;
  friend class KvPartReader;
  KvCache(KvCacheConfig config, KvStorage storage, std::vector<int32_t> layer_index);

  Status check_seq(SeqId seq, const char* op, const char* what) const;
  // Planning and committing (kv_cache_place.cc).
  bool find_slot(const Ubatch& ub, StreamSlots* slots, KvJournal* journal, std::string* why);
  bool place_ubatch(const Ubatch& ub, std::vector<StreamSlots>* placement, KvJournal* journal,
                    std::string* why);
  void apply_placement(const Ubatch& ub, const std::vector<StreamSlots>& placement,
                       KvJournal* journal);
  // Journaled cell change; with save_rows, saves the K/V rows of an occupied cell at its first
  // change in this journal (the pre-transaction bytes).
  void journal_set(KvJournal* journal, uint32_t stream, uint32_t cell, Pos pos, const SeqSet& seqs,
                   int32_t shift, bool save_rows);
  void journal_head(KvJournal* journal, uint32_t stream, uint32_t head);
  void undo(KvJournal* journal);
  // Moves a stream's head back to `cell` when a freed cell lies before it.
  void note_freed(uint32_t stream, uint32_t cell);

  KvCacheConfig config_;
  std::vector<KvCells> cells_;  // [n_stream]
  KvStorage storage_;
  std::vector<int32_t> layer_index_;  // [n_layer] model layer -> storage layer, -1 if not held
  uint64_t epoch_ = 0;
  std::vector<Pos> pos_max_before_;  // [n_seq_max] find_slot scratch: seq_pos_max before a ubatch
  std::vector<uint32_t> scratch_cells_;
};

}  // namespace mnemo
