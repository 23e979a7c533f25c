// Forward: one model's forward pass over one ubatch, reading and writing K/V through the views,
// placement and masks of a memory context (docs/design.md §1: the model keeps no private cache).
//
// Per ubatch of T rows: embeddings -> n_layer transformer blocks -> final norm -> output
// projection for the rows that want an output. In each block the K and V rows of the ubatch are
// written (converted to the cache's K/V type) into the cells the placement chose, then every
// stream's rows attend over that stream's cells [0, n_kv) with the context's mask.
//
// Architectures: llama/qwen2/qwen3/qwen3moe blocks (src/model/llama.cc), gemma3 blocks
// (src/model/gemma3.cc); shared pieces in src/model/forward.cc. Recurrent architectures:
// mamba2 (src/model/mamba2.cc) and granitehybrid (src/model/hybrid.cc), whose Mamba-2
// blocks read and write the recurrent state of the memory context (rs_for_layer), and qwen35 /
// qwen35moe (src/model/qwen35.cc), whose Gated DeltaNet blocks do the same.
//
// Not thread-safe: one Forward per Context; it uses the Context's ThreadPool inside kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "mnemo/memory.h"
#include "mnemo/model.h"
#include "mnemo/status.h"
#include "mnemo/thread_pool.h"
#include "mnemo/ubatch.h"

namespace mnemo {

class Forward {
 public:
  /// Floats of each fixed scratch buffer for n_ubatch_max rows (the buffers grown on demand by
  /// the recurrent and expert blocks are not included).
  struct ScratchSizes {
    size_t x = 0, h = 0, q = 0, k = 0, v = 0, attn = 0, gate = 0, up = 0;
    /// Total bytes.
    size_t bytes() const { return (x + h + q + k + v + attn + gate + up) * sizeof(float); }
  };
  /// The sizes the constructor allocates, computed without allocating (for a check against the
  /// machine's memory first). The widths of a loaded model are bounded by its tensors, so the
  /// products fit in 64 bits for any n_ubatch_max.
  static ScratchSizes scratch_sizes(const Model& model, uint32_t n_ubatch_max);

  /// n_ubatch_max: the most rows run() will see (sizes the scratch buffers, scratch_sizes).
  /// Throws std::bad_alloc when they cannot be allocated.
  Forward(const Model& model, ThreadPool* pool, uint32_t n_ubatch_max);

  /// Runs `ub` (the current ubatch of `mctx`, already applied). For its k-th output row (in
  /// ubatch order) writes n_vocab logits to out_rows[k]; out_rows.size() == ub.n_outputs().
  /// Returns Aborted (and writes no logits) when abort() says so between layers.
  Status run(const MemoryContext& mctx, const Ubatch& ub, std::span<float* const> out_rows,
             const AbortFn& abort);

  /// Logits for part of the vocabulary (a draft model's head; the idea of Zhao et al. 2025,
  /// "FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked Speculative
  /// Sampling"): from the next run() on, token ids [0, n_head) and the ids in `extra` get their
  /// logits, bit for bit those of the whole vocabulary, and every other id -infinity. n_head 0
  /// or >= n_vocab: the whole vocabulary again (extra ignored). extra: ids in [n_head, n_vocab)
  /// (CHECKed), duplicates ignored. Cost: gathers and packs the extra ids' rows of the output
  /// matrix (O(|extra| * n_embd)).
  void set_output_subset(uint32_t n_head, std::span<const int32_t> extra);

  /// Re-rotates the cached K rows an update context lists (after seq_add / seq_div), for every
  /// attention layer, before the context's apply() clears the shifts.
  void apply_shifts(const MemoryContext& update);

  const Model& model() const { return model_; }

 private:
  // One block of each family (llama.cc, gemma3.cc); x: [T x n_embd] residual stream, in place.
  void llama_layer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub);
  void gemma3_layer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub);
  // Recurrent architectures. ssm_block runs block il of mamba2, or of a hybrid (hybrid_layer:
  // granitehybrid, qwen35, qwen35moe); mamba2_mixer: in [T x n_embd] (normed) -> out
  // [T x n_embd], the state of rs's sequence updated. out may alias in.
  void ssm_block(uint32_t il, const MemoryContext& mctx, const Ubatch& ub);
  void hybrid_layer(uint32_t il, const MemoryContext& mctx, const Ubatch& ub);
  void mamba2_mixer(uint32_t il, const RecurrentMemoryContext& rs, const float* in, float* out);
  // qwen35 / qwen35moe (src/model/qwen35.cc): the Gated DeltaNet mixer and the gated
  // attention; in [T x n_embd] (normed) -> out [T x n_embd], out may alias in.
  void delta_net_mixer(uint32_t il, const RecurrentMemoryContext& rs, const float* in, float* out);
  void gated_attention(uint32_t il, const KvCacheContext& kv, const Ubatch& ub, const float* in,
                       float* out);

  // Sub-blocks shared by the architectures (blocks.cc); in [T x n_embd] (normed) -> out
  // [T x n_embd], out may alias in. attention_sublayer: Wo · attn(q, k, v) + bo with
  // q = rope(norm_q(Wq·in + bq)), k = rope(norm_k(Wk·in + bk)), v = Wv·in + bv, K/V written to
  // the cache; biases and q/k norms only where layer il has them, RoPE only when rope_dim > 0.
  // gated_ffn: Wdown · (act(Wgate·in) * Wup·in), act SiLU (SwiGLU) or tanh-GELU (GeGLU).
  enum class FfnAct { kSilu, kGelu };
  void attention_sublayer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub, const float* in,
                          float* out);
  void gated_ffn(uint32_t il, FfnAct act, const float* in, float* out);
  // moe_ffn: mixture of experts (HParams::is_moe): the router picks n_expert_used experts per
  // row, each a SwiGLU feed-forward; out = their outputs weighted by the router's gate values.
  void moe_ffn(uint32_t il, const float* in, float* out);

  // Shared pieces (forward.cc).
  kernels::RopeParams rope_params(uint32_t il) const;
  const float* rope_table_for(uint32_t il, const Ubatch& ub);
  // q: [T x n_head*hd_k], k: [T x n_embd_k_gqa], v: [T x n_embd_v_gqa] (after RoPE / norms).
  // Writes k, v into the cache cells of the placement, then attends; out: [T x n_head*hd_v].
  void attention(uint32_t il, const KvCacheContext& kv, const Ubatch& ub, const float* q,
                 const float* k, const float* v, float* out);
  static kernels::WeightMatrix matrix(const Weight& w);
  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y);
  void add_bias(const Weight& b, float* y, int64_t n_tokens);
  // The residual stream of a block, over the ubatch's T rows of n_embd: norm_rows writes
  // rms_norm(in) * w (eps rms_eps) to out (in: x_, or h_ in place for a post-norm);
  // add_residual adds h_, times scale when scale != 1, to x_.
  void norm_rows(const float* in, const Weight& w, float* out);
  void add_residual(float scale = 1.0f);

  const Model& model_;
  const HParams& hp_;
  ThreadPool* pool_;
  uint32_t n_ubatch_max_;
  uint32_t n_tokens_ = 0;  // rows of the ubatch being run

  // Scratch, sized for n_ubatch_max rows.
  std::vector<float> x_;        // [T x n_embd] residual stream
  std::vector<float> h_;        // [T x n_embd] normed input of a sub-block / its output
  std::vector<float> q_;        // [T x n_head * hd_k]
  std::vector<float> k_;        // [T x n_embd_k_gqa]
  std::vector<float> v_;        // [T x n_embd_v_gqa]
  std::vector<float> attn_;     // [T x n_head * hd_v]
  std::vector<float> gate_;     // [T x n_ff]
  std::vector<float> up_;       // [T x n_ff]
  std::vector<float> ssm_buf_;  // mamba2 / qwen35 mixer scratch, grown on demand
  std::vector<float> moe_buf_;  // moe_ffn scratch (src/model/blocks.cc), grown on demand
  // Output of a stacked projection (LayerWeights::qkv_stack / gate_up_stack), [T x rows] for
  // T <= kStackMaxTokens, grown on demand.
  std::vector<float> stack_;
  // Ubatches of at most this many rows (decoding, speculative verification, small server steps)
  // multiply with the stacked projections: bound by reading the weights, they gain from fewer,
  // longer calls; larger ones are bound by arithmetic and skip the copy out of stack_.
  static constexpr int64_t kStackMaxTokens = 8;
  std::vector<float> qg_, og_;  // gathered rows of one stream: [rows x n_head * hd]
  // set_output_subset: head_rows_ 0 = the whole vocabulary; head_ views the output matrix's
  // first head_rows_ rows; extra_ multiplies the gathered rows (extra_src_) of extra_ids_.
  void output_subset(const float* x, int64_t n, float* y);
  uint32_t head_rows_ = 0;
  kernels::PackedMatrix head_;
  std::vector<int32_t> extra_ids_;
  std::vector<uint8_t> extra_src_;
  kernels::PackedMatrix extra_;
  std::vector<float> extra_logits_;              // [n x |extra_ids_|]
  std::vector<std::vector<float>> rope_tables_;  // [2] global / sliding-window layers
  std::vector<int32_t> rope_pos_;
};

}  // namespace mnemo
