// Models: hyper-parameters and weights bound to a GGUF file's tensors, for the architectures
// mnemo runs (the list: docs/design.md §2; recurrent ones load through src/model/model_ssm.cc and
// model_qwen35.cc).
//
// Tensor names and metadata keys follow what llama.cpp's converter writes (GGUF spec "Standardized
// tensor names", and gguf-py's constants.py MODEL_TENSORS for each architecture), so published
// GGUF files load unchanged. Weights are not copied: they point into the file's mapping.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "mnemo/rope.h"
#include "mnemo/status.h"
#include "mnemo/swa.h"

namespace mnemo {
class RepackCacheFile;  // src/model/repack_cache.h
class AlignedBuffer;    // src/base/buffer.h
class ThreadPool;       // mnemo/thread_pool.h

namespace kernels {
class PackedMatrix;  // src/kernels/kernels.h: a weight matrix repacked for the integer kernels
}  // namespace kernels

/// Returns true when the caller wants the current decode to stop (checked by the forward pass
/// between layers and by Context::decode between ubatches).
using AbortFn = std::function<bool()>;

/// Supported architectures (value of general.architecture).
enum class Arch {
  kLlama,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kGemma3,
  kMamba2,
  kGraniteHybrid,
  kQwen35,
  kQwen35Moe
};

/// The general.architecture string: "llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "mamba2",
/// "granitehybrid", "qwen35", "qwen35moe".
const char* arch_name(Arch arch);
/// The architecture for a general.architecture string; NotSupported listing the supported ones.
Result<Arch> arch_from_name(const std::string& name);

/// Hyper-parameters read from GGUF metadata ({arch}.* keys) plus per-architecture constants.
struct HParams {
  Arch arch = Arch::kLlama;
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;             // {arch}.context_length
  uint32_t n_embd = 0;                  // {arch}.embedding_length
  uint32_t n_layer = 0;                 // {arch}.block_count
  uint32_t n_head = 0;                  // {arch}.attention.head_count
  uint32_t n_head_kv = 0;               // {arch}.attention.head_count_kv (default n_head)
  uint32_t head_dim_k = 0;              // {arch}.attention.key_length (default n_embd / n_head)
  uint32_t head_dim_v = 0;              // {arch}.attention.value_length (default head_dim_k)
  uint32_t n_ff = 0;                    // {arch}.feed_forward_length
  float rms_eps = 1e-5f;                // {arch}.attention.layer_norm_rms_epsilon
  uint32_t rope_dim = 0;                // {arch}.rope.dimension_count (default head_dim_k)
  float rope_freq_base = 10000.0f;      // {arch}.rope.freq_base
  float rope_freq_base_swa = 10000.0f;  // base of the sliding-window layers (gemma3: 10000)
  float rope_freq_scale = 1.0f;         // 1 / {arch}.rope.scaling.factor for linear scaling
  kernels::RopeMode rope_mode = kernels::RopeMode::kNormal;  // kNeox for qwen2/3, gemma3
  uint32_t n_swa = 0;                 // {arch}.attention.sliding_window (0: none)
  SwaType swa_type = SwaType::kNone;  // mask kind of the sliding-window layers (swa.h)
  uint32_t swa_period = 0;            // gemma3: every 6th layer (il % 6 == 5) is global
  float attn_scale = 0.0f;            // multiplier of Q before QK^T (1/sqrt(head_dim_k) by default)
  float embd_scale = 1.0f;            // gemma: sqrt(n_embd)
  bool tied_output = false;           // output projection is token_embd
  // --- mixture of experts (qwen3moe): {arch}.expert_* keys -------------------------------------
  uint32_t n_expert = 0;       // expert_count (0: dense feed-forward)
  uint32_t n_expert_used = 0;  // expert_used_count: experts each token is routed to (top-k)
  uint32_t n_ff_exp = 0;       // expert_feed_forward_length: hidden width of one expert
  /// expert_shared_feed_forward_length: width of the shared expert every token also runs
  /// (qwen35moe; 0: none). Its output is scaled by sigmoid(ffn_gate_inp_shexp · x).
  uint32_t n_ff_shexp = 0;
  /// The router's gate: softmax over the experts' logits (qwen3moe) or a sigmoid per expert.
  enum class ExpertGating : uint8_t { kSoftmax, kSigmoid };
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool expert_weights_norm = false;  // the top-k gate values are rescaled to sum to 1
  bool is_moe() const { return n_expert > 0; }
  // --- recurrent layers (mamba2, granitehybrid, qwen35): {arch}.ssm.* keys --------------------
  // Mamba-2 reads them as named. Gated DeltaNet (qwen35) reuses the keys as llama.cpp's converter
  // writes them: inner_size = value heads x head dim (the value width), state_size = the key (and
  // value) head dim, time_step_rank = value heads, group_count = key heads.
  uint32_t ssm_d_conv = 0;   // ssm.conv_kernel: width of the causal depthwise conv
  uint32_t ssm_d_inner = 0;  // ssm.inner_size: d_inner = ssm_n_head * head dim
  uint32_t ssm_d_state = 0;  // ssm.state_size: N, the state size per channel
  uint32_t ssm_n_head = 0;   // ssm.time_step_rank: Mamba-2 heads (one dt, A, D per head)
  uint32_t ssm_n_group = 0;  // ssm.group_count: groups of heads sharing B and C
  std::vector<uint8_t> recurrent_layer;  // [n_layer] 1: recurrent block; empty: none
  float residual_scale = 1.0f;  // granite {arch}.residual_scale: block outputs scaled before adds
  float logit_scale = 1.0f;     // granite {arch}.logit_scale: logits divided by it
  bool has_recurrent_layers() const { return !recurrent_layer.empty(); }
  bool is_recurrent_layer(uint32_t il) const {
    return il < recurrent_layer.size() && recurrent_layer[il] != 0;
  }
  /// Channels through the conv: x, B and C (d_inner + 2 * n_group * d_state).
  uint32_t ssm_conv_channels() const { return ssm_d_inner + 2 * ssm_n_group * ssm_d_state; }
  /// Floats of one sequence's conv state / ssm state per recurrent layer.
  uint32_t n_embd_r() const { return (ssm_d_conv - 1) * ssm_conv_channels(); }
  uint32_t n_embd_s() const { return ssm_d_state * ssm_d_inner; }
  // --- end recurrent layers --------------------------------------------------------------------

  uint32_t n_embd_k_gqa() const { return head_dim_k * n_head_kv; }
  uint32_t n_embd_v_gqa() const { return head_dim_v * n_head_kv; }
  /// True for layers that use the sliding window (gemma3 local layers).
  bool is_swa_layer(uint32_t il) const {
    return n_swa > 0 && swa_period > 0 && (il % swa_period) != swa_period - 1;
  }
};

/// A weight tensor bound to the mapping: ne1 rows of ne0 elements of `type` (GGUF order:
/// ne0 is the row length). data == nullptr means "absent" (optional tensors).
struct Weight {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0;
  int64_t ne1 = 1;
  size_t row_bytes = 0;
  /// The same matrix rearranged for the integer kernels (kernels::PackedMatrix), owned by the
  /// Model; null when the weight is not repacked (vectors, embeddings read by row, types or CPUs
  /// where packing does not pay, ModelParams::repack off). Forward uses it when present.
  const kernels::PackedMatrix* packed = nullptr;
  /// An experts tensor (LayerWeights::ffn_*_exps) is repacked expert by expert: packed_slices[e]
  /// holds rows [e * slice_rows, (e + 1) * slice_rows). Empty when not repacked.
  std::vector<const kernels::PackedMatrix*> packed_slices;
  int64_t slice_rows = 0;

  bool present() const { return data != nullptr; }
  /// Row r as a byte pointer. r < ne1.
  const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes; }
  /// The data as floats; only for F32 tensors (CHECKed).
  const float* f32() const;
};

/// One transformer block's weights (absent tensors have data == nullptr).
struct LayerWeights {
  Weight attn_norm;                   // [n_embd]
  Weight wq, wk, wv, wo;              // [n_embd -> n_head*hd], [-> n_embd_k_gqa], ..., [-> n_embd]
  Weight bq, bk, bv;                  // qwen2 biases
  Weight attn_q_norm, attn_k_norm;    // qwen3 / gemma3 per-head RMSNorm [head_dim]
  Weight post_attn_norm;              // gemma3 [n_embd]
  Weight ffn_norm;                    // [n_embd]
  Weight ffn_gate, ffn_up, ffn_down;  // [n_embd -> n_ff], [n_embd -> n_ff], [n_ff -> n_embd]
  Weight post_ffn_norm;               // gemma3 [n_embd]
  // Mixture of experts (HParams::is_moe). E = n_expert, F = n_ff_exp. The experts' matrices are
  // one 3-D tensor each; expert e's rows are [e * F, (e + 1) * F) (gate, up) or
  // [e * n_embd, (e + 1) * n_embd) (down).
  Weight ffn_gate_inp;   // router [n_embd -> E]
  Weight ffn_gate_exps;  // [n_embd -> F] x E
  Weight ffn_up_exps;    // [n_embd -> F] x E
  Weight ffn_down_exps;  // [F -> n_embd] x E
  // Mamba-2 mixer (recurrent layers of mamba2 / granitehybrid). H = ssm_n_head.
  Weight ssm_in;        // [n_embd -> 2 * d_inner + 2 * n_group * d_state + H]: z, xBC, dt
  Weight ssm_conv1d;    // f32 [conv channels rows of d_conv taps]
  Weight ssm_conv1d_b;  // f32 [conv channels] (optional)
  Weight ssm_dt_b;      // f32 [H] dt bias
  Weight ssm_a;         // f32 [H] A = -exp(A_log) (GGUF shape [1, H])
  Weight ssm_d;         // f32 [H] skip connection D (GGUF shape [1, H])
  Weight ssm_norm;      // f32 [d_inner] gated RMSNorm weight (GGUF shape [d_inner / G, G])
  Weight ssm_out;       // [d_inner -> n_embd]
  Weight bo;            // granitehybrid attn_output.bias [n_embd] (optional)
  // Gated DeltaNet mixer (recurrent layers of qwen35 / qwen35moe; ssm_conv1d, ssm_dt_b, ssm_a,
  // ssm_out as above, ssm_norm [head dim]). Hk key heads, Hv value heads, head dim d.
  Weight ssm_qkv;    // attn_qkv [n_embd -> 2 Hk d + Hv d]: q, k, v before the conv
  Weight ssm_z;      // attn_gate [n_embd -> Hv d]: the output gate z
  Weight ssm_beta;   // ssm_beta [n_embd -> Hv]: write strength, sigmoid
  Weight ssm_alpha;  // ssm_alpha [n_embd -> Hv]: decay, softplus(alpha + dt_bias) * A
  // Shared expert (qwen35moe; HParams::n_ff_shexp > 0).
  Weight ffn_gate_inp_shexp;                            // [n_embd -> 1] gate of the shared expert
  Weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;  // SwiGLU of width n_ff_shexp
  // The packed wq | wk | wv rows (wq | wk when !qkv_stack_has_v) and ffn_gate | ffn_up rows
  // read as one matrix each (kernels::packed_stack), owned by the Model: one matmul instead of
  // three / two for the few rows of a decoding step. Null where the weights are not packed
  // one after another in the same form.
  const kernels::PackedMatrix* qkv_stack = nullptr;
  bool qkv_stack_has_v = false;
  const kernels::PackedMatrix* gate_up_stack = nullptr;
};

/// How a model is loaded.
struct ModelParams {
  /// Repack the linear weights at load time into kernels::PackedMatrix (row-interleaved layouts
  /// for the AVX-512 VNNI / AMX and the AVX2 kernels; see mnemo/kernels.h), as llama.cpp's
  /// repacked CPU buffers do. Costs one pass over the weights at load. The file's pages of a
  /// repacked tensor are released (gguf::File::release_pages; for a tied output matrix the
  /// embedding rows that get_rows reads fault back in from the file), so memory grows only by
  /// what the packed form adds: under 3% in both layouts (8 rows for AVX2 / AVX3, 16 rows for
  /// AVX3_DL / AMX). `--no-repack` turns it off.
  bool repack = true;
  /// Threads used for repacking (0: all hardware threads).
  int n_threads = 0;
  /// Repack cache directory ("" = none; `--repack-cache DIR`): the repacked weights are kept
  /// there in one file per model file, SIMD target and packed-layout version, and a later load
  /// maps that file (checked: every entry's XXH3) and copies it into huge pages instead of
  /// packing again. A missing, stale or damaged file is (re)written after packing; a directory
  /// that cannot be written only costs the saving (Model::repack_note says why). Format:
  /// src/model/repack_cache.h.
  std::string repack_cache_dir;
};

/// Loaded model: the mapped file, hyper-parameters and weights. Immutable after load, so one
/// Model can be shared by several contexts and threads.
class Model {
 public:
  /// Opens and validates a GGUF model. NotFound / Corruption from the reader; NotSupported for an
  /// unknown architecture (the message lists the supported ones) or tensor type; InvalidArgument
  /// naming the tensor for a missing tensor or a wrong shape. `params`: repacking (ModelParams).
  static Result<std::unique_ptr<Model>> load(const std::string& path,
                                             const ModelParams& params = {});
  ~Model();

  const HParams& hparams() const { return hp_; }
  const gguf::File& file() const { return file_; }
  const Weight& token_embd() const { return token_embd_; }  // [n_vocab rows of n_embd]
  const Weight& output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  // [n_vocab rows of n_embd]
  const std::vector<LayerWeights>& layers() const { return layers_; }
  /// Total bytes of all tensors.
  uint64_t n_bytes() const;
  /// Number of parameters.
  uint64_t n_params() const;
  /// Bytes held by repacked copies of weights (0 when nothing was repacked).
  uint64_t n_packed_bytes() const;
  /// Bytes of weights one token's forward pass reads: every matrix it multiplies with (its
  /// repacked copy where there is one, else the GGUF tensor) plus one embedding row and the
  /// f32 vectors (norms, biases, SSM parameters). For `mnemo bench --bandwidth`.
  uint64_t n_decode_bytes() const;
  /// Number of repacked matrices (see ModelParams::repack).
  size_t n_packed() const { return packed_.size(); }
  /// What the repack cache did at load: "" (none), "read from the repack cache" (copied into
  /// huge pages), "mapped from the repack cache" (read in place: no memory for the copy),
  /// "written to the repack cache", or why it was not used or written.
  const std::string& repack_note() const { return repack_note_; }
  /// A short description: "llama 30 blocks, 134.5 M params, 82.0 MiB (q4_1)".
  std::string describe() const;

 private:
  explicit Model(gguf::File file);
  Status load_hparams();
  Status bind_weights();
  Status load_ssm_hparams();  // mamba2 / granitehybrid (src/model/model_ssm.cc)
  Status bind_ssm_weights();
  /// Binds token_embd, output_norm (f32) and output (tied to token_embd when absent) for the
  /// recurrent loaders (src/model/model_ssm.cc); sets n_vocab from token_embd when unknown.
  Status bind_embedding_and_output();
  Status load_qwen35_hparams();  // qwen35 / qwen35moe (src/model/model_qwen35.cc)
  Status bind_qwen35_weights();
  /// Repacks every linear weight (see ModelParams::repack), through the repack cache when
  /// `cache_dir` is set (`mtime_ns`: the model file's modification time, for its key).
  void repack_weights(int n_threads, const std::string& cache_dir, int64_t mtime_ns);
  /// Copies the packed matrices `made` (read from the mapped repack cache) into packed_arena_,
  /// one after another, and points them there; then unmaps the cache file. The page cache maps
  /// a file's pages mostly 4 KiB at a time, and a decode read them 20% slower than the arena's
  /// huge pages. Leaves everything as it is when the arena cannot be mapped.
  void copy_packed_to_arena(std::vector<kernels::PackedMatrix>& made, ThreadPool* pool);

  gguf::File file_;
  HParams hp_;
  Weight token_embd_, output_norm_, output_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<kernels::PackedMatrix>> packed_;  // owners of Weight::packed
  // Owners of LayerWeights::qkv_stack / gate_up_stack (views of packed_'s bytes).
  std::vector<std::unique_ptr<kernels::PackedMatrix>> stacked_;
  std::unique_ptr<RepackCacheFile> repack_file_;  // the mapped cache the packed weights read
  // The packed weights when packed at load: one mapping in transparent huge pages, the matrices
  // one after another in the order repack_weights lists them (the order a forward pass reads).
  std::unique_ptr<AlignedBuffer> packed_arena_;
  std::string repack_note_;
};

}  // namespace mnemo
