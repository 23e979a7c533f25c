// Context: a model plus its memory, scratch buffers and threads; decode() runs batches through
// the path of docs/design.md §1:
//
//   init_update (pending shifts -> K re-rotated) -> init_batch (split, place, prove it fits;
//   nothing changed on failure) -> for each ubatch: apply, forward -> outputs in the caller's
//   order. On a forward error or an abort the memory context rolls back: the memory is exactly
//   as it was before decode().
//
// The memory kind of each architecture (docs/design.md §2, the list of architectures) is built
// by make_memory (src/memory/make_memory.h) from src/context/memory_params.h. n_ctx follows
// llama.cpp: the total number of cells; in split mode (kv_unified = false, the default) each of the
// n_seq_max streams gets n_ctx / n_seq_max cells.
//
// Not thread-safe: one thread drives a Context (the CLI, or the server loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/memory.h"
#include "mnemo/model.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"
#include "mnemo/thread_pool.h"

namespace mnemo {

class Forward;            // src/model/forward.h: one forward pass per ubatch
struct ModelFingerprint;  // mnemo/state.h

/// Settings of a Context (names as llama.cpp's context parameters and CLI flags).
struct ContextParams {
  uint32_t n_ctx = 4096;            // -c: total KV cells (split mode: divided among the sequences)
  uint32_t n_batch = 2048;          // -b: most rows one decode() accepts
  uint32_t n_ubatch = 512;          // -ub: most rows one forward pass processes
  uint32_t n_seq_max = 1;           // -np: sequences [0, n_seq_max)
  bool kv_unified = false;          // -kvu: one stream shared by all sequences
  GgmlType type_k = GgmlType::F16;  // -ctk
  GgmlType type_v = GgmlType::F16;  // -ctv
  int n_threads = 0;                // -t: 0 = the number of hardware threads
  /// A compute pool shared with other contexts (ThreadPool::set_shared: a router's models take
  /// turns on one pool); null: the context makes its own of n_threads threads. When set,
  /// n_threads is the pool's.
  std::shared_ptr<ThreadPool> pool;
  bool swa_full = false;            // --swa-full: full-size cache for sliding-window layers
  /// Hadamard rotation of quantized K/V (src/memory/kv_rotation.h): on by default; applies to
  /// streams whose K or V type is quantized, when the head size is a power of two.
  bool kv_rotation = true;  // --no-kv-rotation turns it off
  // Recurrent layers (mamba2, granitehybrid): each sequence's state is checkpointed
  // every rs_checkpoint_interval tokens, rs_n_checkpoints kept per sequence (either 0: none).
  // Checkpoints let seq_rm / plan_truncate cut a sequence back (prompt caching, rollback).
  uint32_t rs_checkpoint_interval = 256;
  uint32_t rs_n_checkpoints = 4;
  // Recurrent layers: the state after each output row of a batch but a sequence's last is kept,
  // the last rs_n_spec per sequence, so seq_rm back to one of those positions is a copy
  // (speculative decoding sets it to --draft-max; src/memory/recurrent_memory.h). 0: none.
  uint32_t rs_n_spec = 0;

  /// InvalidArgument naming the field for a bad value (n_ubatch > n_batch, an unsupported K/V
  /// type, n_seq_max outside [1, 256], ...).
  Status validate() const;
};

class Context {
 public:
  /// Builds the memory for the model's architecture and the scratch buffers. Errors: the
  /// params' validation, NotSupported for a model/type combination the kernels cannot run,
  /// NoSpace when the KV storage cannot be allocated.
  static Result<std::unique_ptr<Context>> create(const Model& model, const ContextParams& params);
  ~Context();

  /// Decodes `batch` (validated against n_batch, n_vocab and the memory's sequences). On success
  /// the logits of every row with output set are available through logits(i), i in the caller's
  /// order. Errors (memory unchanged in every case): InvalidArgument for a bad batch (message
  /// names the row), NoSpace when it does not fit, Aborted when the abort callback fired.
  Status decode(const Batch& batch);

  /// Start-up check of a long-running user (the server) that the memory it was given can be
  /// used in full: the memory's worst case (Memory::init_full: every cell in use) must be
  /// possible, and the bytes mapped for K/V (MemoryBreakdown::mapped_bytes, touched only as cells
  /// fill) must not exceed `available_bytes` (the machine's available memory: MemAvailable plus
  /// free swap on Linux). Errors: NoSpace naming n_ctx, the bytes needed and available, and what
  /// to change (-c, -np, -ctk / -ctv); nothing changes either way.
  Status reserve(size_t available_bytes);

  /// Number of output rows of the last successful decode.
  uint32_t n_outputs() const { return n_outputs_; }
  /// Logits of output row i of the last decode: [n_vocab] floats. i < n_outputs().
  std::span<const float> logits(uint32_t i) const;

  /// Scores part of the vocabulary from the next decode on (a draft model's head: its drafts
  /// only need the likely tokens; the idea of Zhao et al. 2025, "FR-Spec"): logits(i) then holds
  /// the logits of token ids [0, n_head) and of the ids in `extra`, bit for bit as with the whole
  /// vocabulary, and -infinity for every other id. The output projection reads n_head + |extra|
  /// rows instead of n_vocab. n_head 0 or >= n_vocab: the whole vocabulary (the default; extra
  /// ignored). Ids of `extra` below n_head and duplicates are ignored. Errors: InvalidArgument
  /// for an id outside [0, n_vocab), and nothing changes. Cost: O(|extra| * n_embd).
  Status set_output_subset(uint32_t n_head, std::span<const int32_t> extra);

  /// Called between ubatches and between layers; returning true aborts the decode (rolled back).
  void set_abort_callback(AbortFn fn) { abort_ = std::move(fn); }

  Memory& memory() { return *memory_; }
  const Memory& memory() const { return *memory_; }
  const Model& model() const { return model_; }
  const ContextParams& params() const { return params_; }
  /// The model's fingerprint (model_fingerprint(model()), computed once at create()): what the
  /// state API (include/mnemo/state.h) writes into and checks against every state of this
  /// context's memory, e.g. state_seq_get_data(ctx.memory(), ctx.fingerprint(), seq, dst).
  /// The type is in mnemo/state.h, which a caller of the state API includes anyway.
  const ModelFingerprint& fingerprint() const { return *fingerprint_; }
  /// Cells per stream.
  uint32_t n_ctx_seq() const { return n_ctx_seq_; }
  ThreadPool& pool() { return *pool_; }

 private:
  Context(const Model& model, const ContextParams& params);

  const Model& model_;
  ContextParams params_;
  std::unique_ptr<const ModelFingerprint> fingerprint_;
  uint32_t n_ctx_seq_ = 0;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Memory> memory_;
  std::unique_ptr<Forward> forward_;
  AbortFn abort_;
  std::vector<float> logits_;  // [n_outputs x n_vocab], caller's order
  uint32_t n_outputs_ = 0;
  std::vector<float*> out_rows_;
};

}  // namespace mnemo
