// CPU compute kernels: matrix multiplication over GGUF weight types, embedding lookup,
// normalization, RoPE, softmax, gated FFN activations, elementwise ops, and attention that
// reads K/V straight from KV-cache rows.
//
// SIMD goes through Google Highway with run-time dispatch (docs/design.md §4): every function here
// picks the best target the CPU supports (AVX3_DL with VNNI, AVX3, AVX2, SSE4, or a scalar
// fallback) once per call. Every SIMD kernel has a scalar reference twin in
// src/kernels/reference.h, and kernels_test compares them on every compiled target.
//
// Conventions:
//   - Matrices are row-major; "[a x b]" means a rows of b elements, rows contiguous unless a
//     stride is given. Strides are in elements for float arrays and in bytes for typed rows.
//   - Activations are float32. Weights and cache rows are GGUF rows (mnemo/quant.h): a row of
//     n elements of type t is row_size(t, n) bytes of blocks.
//   - A ThreadPool* may be null: the work then runs on the calling thread.
//   - Shapes are preconditions: violations are programming errors and CHECK-fail (never bad
//     outside input: callers validate files and requests first, e.g. with matmul_supports()).
//   - Output buffers must not overlap inputs unless a function says "may alias".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "mnemo/quant.h"
#include "mnemo/rope.h"

namespace mnemo {

class ThreadPool;

namespace kernels {

/// Name of the Highway target the kernels dispatch to now: "AVX3_DL", "AVX3", "AVX2", "SSE4",
/// "SCALAR" (or another Highway target name on other architectures).
const char* simd_target();

/// Caps the dispatch at a target: the kernels then use the best target the CPU supports that
/// is not better than `name` ("AVX3_DL", "AVX3", "AVX2", "SSE4", "SCALAR"; any case). Returns
/// false (and changes nothing) for another name. The environment variable MNEMO_SIMD=NAME does
/// this when the program starts, so one machine can run (and test) every path below its best,
/// e.g. MNEMO_SIMD=AVX2 on an AVX-512 CPU. Call it before any kernel runs: weights packed for
/// one target are read through their source on another (slower, same results as unpacked).
bool set_simd_cap(std::string_view name);

/// The target a process of this CPU uses when MNEMO_SIMD is not set: Highway's best, but AVX3
/// (not AVX3_DL) on a CPU without AMX, where the AVX3_DL kernels are slower (matmul_core.cc).
const char* default_simd_target();

// ---------------------------------------------------------------------------------------------
// Matrix multiplication

/// A weight matrix as stored in a GGUF file: n_out rows of n_in elements of `type`, each row
/// row_size(type, n_in) bytes, rows contiguous (row r at data + r * row_size(type, n_in)).
/// Non-owning: `data` (usually the mmapped file) must outlive every call that uses it.
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_out = 0;  // rows (output features)
  int64_t n_in = 0;   // elements per row (input features); a multiple of block_size(type)
};

/// Whether matmul() and get_rows() handle weights of this type: F32, F16, BF16, Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K.
bool matmul_supports(GgmlType type);

/// y = x * W^T: y[t][r] = sum_i x[t][i] * W[r][i].
///   x: [n_tokens x w.n_in] float, row stride x_stride (>= n_in) elements.
///   y: [n_tokens x w.n_out] float, row stride y_stride (>= n_out) elements; must not overlap x.
/// Quantized weights: each call quantizes x once to 8-bit integers with one float scale per 32
/// elements (as ggml's Q8_0, also for K-quants, where ggml uses one scale per 256: finer, so
/// more accurate; the per-block sums are kept for the offsets of Q4_1 / Q5_1 / K-quant minimums)
/// and multiplies in integers (AVX-512 VNNI dpbusd, or maddubs + madd on AVX-512 / AVX2 /
/// SSE4), one float multiply-add per 32 elements. This is the approach of ggml's
/// vec_dot_q*_q8_*; the relative error it adds is about 1/254 per block of x (half a
/// quantization step of x). F32 / F16 / BF16 weights multiply in float (FMA).
/// Rows are unpacked per task into a dot-friendly form (in L1 for few tokens, L2 for prompts)
/// and register tiles of rows x tokens stream over it, 64 tokens at a time. Threads split the
/// rows (and, for narrow outputs, the tokens). A token's outputs are bit-identical for any number
/// of threads and whatever other tokens the call holds: every tile computes an element with the
/// same operations (docs/numerics.md).
void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool* pool);
/// The same with contiguous x ([n_tokens x n_in]) and y ([n_tokens x n_out]).
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);

/// A weight matrix rearranged once, at load time, for the integer kernels: groups of rows are
/// interleaved so that one vector register holds 4 consecutive weights of each row of the group
/// (the integer dot instruction then accumulates all the group's rows at once against
/// broadcast activations, with no shuffles and no horizontal sums). Two layouts, chosen by the
/// SIMD target that packs:
///   - AVX3_DL (AVX-512 VNNI): 16 rows per 512-bit register, dpbusd; on CPUs with AMX-INT8
///     (Xeon Sapphire Rapids and later; Linux grants the tile state on first use) prompts of
///     9+ tokens multiply with AMX tiles, which read this same layout (a last block of up to
///     8 tokens takes dpbusd on the widened rows; MNEMO_NO_AMX=1 turns AMX off).
///     kernels/packed-inl.h.
///   - AVX2 and AVX3 (AVX-512 without VNNI): 8 rows per 256-bit register, maddubs + madd, 4-bit
///     quants kept as nibbles, fifth bits (Q5) and high bit pairs (Q6_K) as bit planes, K-quant
///     scales as in the GGUF (fp16 super-block scales, 8-bit sub-block scales): within 3% of the
///     GGUF rows' size for every type. kernels/packed256-inl.h.
/// Quants stay 4 / 5 / 6 / 8 bits wide, block scales are kept per row group: the same size as the
/// GGUF rows for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (fp16 scales kept as they are); K-quants keep their
/// 8-bit sub-block scales and fp16 super-block scales, multiplied when read: Q6_K within 1%,
/// Q4_K / Q5_K within 3% (a byte per 6-bit scale). This is the idea of ggml's repacked CPU buffers
/// (the AMX / "extra" buffer types). Packed matrices of 2 MiB or more live in transparent huge
/// pages (MADV_HUGEPAGE): a decode streams every weight once per token (pack_matrix_into packs
/// into the caller's memory, so that smaller ones can share a huge-page mapping). Other types (F32,
/// F16, BF16, IQ4_NL) and targets (SSE4, scalar) keep just the source, which matmul() then reads.
/// Use: pack each linear weight once when the model loads (hold the PackedMatrix next to the
/// tensor) and call matmul(packed, ...) in the forward pass. Move-only; owns its packed bytes
/// unless they are someone else's (adopt_packed, packed_rows, pack_matrix_into); `source`
/// (non-owning) must outlive it. Packed data is read only under the target layout it was
/// packed for; under another (MNEMO_SIMD, tests) matmul() reads the source.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  PackedMatrix(PackedMatrix&&) noexcept = default;
  PackedMatrix& operator=(PackedMatrix&&) noexcept = default;
  PackedMatrix(const PackedMatrix&) = delete;
  PackedMatrix& operator=(const PackedMatrix&) = delete;

  /// The GGUF matrix this was made from.
  const WeightMatrix& source() const { return source_; }
  /// Whether a packed copy exists (false: matmul reads the source).
  bool is_packed() const { return data_ != nullptr; }
  /// Bytes held by the packed copy (0 when not packed).
  size_t packed_bytes() const { return bytes_; }

 private:
  friend PackedMatrix pack_matrix(const WeightMatrix& w, ThreadPool* pool);
  friend PackedMatrix pack_matrix_into(const WeightMatrix& w, void* dst, ThreadPool* pool);
  friend struct PackedImage packed_image(const PackedMatrix& m);
  friend PackedMatrix adopt_packed(const WeightMatrix& w, const struct PackedImage& img);
  friend PackedMatrix packed_rows(const PackedMatrix& m, int64_t n_rows);
  friend PackedMatrix packed_stack(std::span<const PackedMatrix* const> parts);
  friend bool reads_packed(const PackedMatrix& m);
  friend PackedMatrix pack_like(const PackedMatrix& m, const WeightMatrix& w, ThreadPool* pool);
  friend void matmul(const PackedMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens,
                     float* y, int64_t y_stride, ThreadPool* pool);
  struct Free {
    Free() : owned(true) {}
    explicit Free(bool owns) : owned(owns) {}
    bool owned;  // false: the bytes belong to someone else (adopt_packed)
    void operator()(void* p) const;
  };
  WeightMatrix source_;
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
  int format_ = 0;           // internal packed-format id (kernels/packed-inl.h)
  int64_t group_bytes_ = 0;  // bytes per group of 16 (or 8) rows
  int layout_ = 0;           // internal layout id (kernels/internal.h PackedLayoutKind)
};

/// Packs `w` (see PackedMatrix); threads split the row groups. Cost: one pass over the weights.
PackedMatrix pack_matrix(const WeightMatrix& w, ThreadPool* pool);

/// Bytes pack_matrix(w) packs `w` into under the current target; 0 when it would not pack w (a
/// type or target without a packed layout, an empty matrix, or one matmul does not take).
size_t packed_size(const WeightMatrix& w);

/// pack_matrix(w, pool), but into the caller's memory: `dst` holds packed_size(w) bytes, is
/// 64-byte aligned (CHECKed), and stays alive and unchanged while the result is used; the result
/// does not free it. So many matrices can share one mapping (the model keeps its weights in one
/// huge-page arena, in the order a forward pass reads them). Not packed (dst untouched) when
/// packed_size(w) == 0.
PackedMatrix pack_matrix_into(const WeightMatrix& w, void* dst, ThreadPool* pool);

/// The bytes of a packed matrix and what reading them needs, to keep them outside the process
/// (the model's repack cache, src/model/repack_cache.h). format / layout / group_bytes are this
/// build's internal ids: valid only with the same kPackedLayoutVersion and SIMD target.
struct PackedImage {
  const void* data = nullptr;  // null: not packed
  size_t bytes = 0;
  int32_t format = 0;
  int32_t layout = 0;
  int64_t group_bytes = 0;
};
/// Version of the packed layouts' bytes: bumped whenever pack_matrix changes what it writes, so
/// that a repack cache made by another version is rebuilt.
inline constexpr int kPackedLayoutVersion = 2;
/// The bytes of `m` (data null when m is not packed); they live as long as m.
PackedImage packed_image(const PackedMatrix& m);
/// A matrix reading packed bytes it does not own (`img.data`: 64-byte aligned, unchanged and
/// alive as long as the matrix) for the source `w`. Not packed (matmul then reads the source)
/// when `img` is not exactly what pack_matrix(w) makes under the current target: another
/// layout, format, group size or byte count. Cost: O(1), nothing is read.
PackedMatrix adopt_packed(const WeightMatrix& w, const PackedImage& img);

/// The first n_rows rows of `m` (0 <= n_rows <= m.source().n_out, CHECKed) as a matrix that
/// reads m's bytes (m must outlive it and stay where it is): matmul() on it gives exactly the
/// first n_rows outputs matmul(m) gives, bit for bit (every output row is computed alone). Packed
/// when m is and n_rows is a whole number of m's row groups (16 or 8 rows); otherwise it reads
/// the first n_rows rows of the source. Cost: O(1), nothing is read.
PackedMatrix packed_rows(const PackedMatrix& m, int64_t n_rows);

/// The matrices `parts` (at least one) as one matrix of their rows stacked in order, so that
/// one matmul() call does the work of several on the same input (a layer's q, k and v
/// projections; its FFN gate and up): fewer calls, each a longer stream of weights. Packed (a
/// view of the parts' bytes: they must outlive it, no copy) only when every part is packed the
/// same way under the current target (type, n_in, format, layout), every part but the last
/// holds whole row groups (16 or 8 rows), and the parts' bytes lie one after another (packed
/// with pack_matrix_into at consecutive offsets). Otherwise the result is not packed, and
/// matmul() must not be called on it (it has no source rows: CHECKed); test with
/// reads_packed(). matmul() on it gives every row bit for bit what matmul() on its part gives
/// (each output row is computed alone). Cost: O(parts), nothing is read.
PackedMatrix packed_stack(std::span<const PackedMatrix* const> parts);

/// Whether matmul(m, ...) reads m's packed bytes under the current target (false: it reads the
/// source, e.g. after MNEMO_SIMD / set_simd_cap chose another layout, or when m is not packed).
bool reads_packed(const PackedMatrix& m);

/// `w` packed the way `m` is: pack_matrix(w, pool) when m is packed under the current target's
/// layout, else w as a source only (not packed). Either way matmul() reads w the way it reads
/// m, so a row of w that is a row of m's source gives the same outputs bit for bit (the rows of
/// a matrix that a model keeps apart, e.g. a part of its output projection). CHECKs as
/// pack_matrix.
PackedMatrix pack_like(const PackedMatrix& m, const WeightMatrix& w, ThreadPool* pool);

/// matmul() on packed weights: the same contract and the same bound on the result (see the
/// other overload); the float arithmetic differs, so results agree with matmul(source) to
/// float rounding, not bit for bit. A token's outputs are bit-identical for any number of
/// threads and whatever other tokens the call holds (docs/numerics.md).
void matmul(const PackedMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool* pool);
/// The same with contiguous x ([n_tokens x n_in]) and y ([n_tokens x n_out]).
void matmul(const PackedMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);

/// Matmul timing, for benchmarks: while on, every matmul() call (either overload; a packed
/// matrix read through its source counts once) adds its wall time in ns (steady clock, from entry
/// to return on the calling thread: the activations' quantization, every task and the wait for
/// the last) to one process-wide total, whichever thread calls. Off by default; on, a call costs
/// two clock reads more. `mnemo bench --bandwidth` uses it to split a generated token's time into
/// the weight streams and the rest (attention, norms, the threads' waits between calls).
void set_matmul_timing(bool on);
/// The total of set_matmul_timing so far, in ns (it only grows; take differences).
int64_t matmul_time_ns();

/// Embedding lookup: out[i] = dequantized row ids[i] of `w`, for i in [0, n_ids).
///   out: [n_ids x w.n_in] float. ids[i] in [0, w.n_out) (CHECKed).
/// Exact: the same values as quant's dequantize_row (mnemo/quant.h).
void get_rows(const WeightMatrix& w, const int32_t* ids, int64_t n_ids, float* out);

/// Converts n_rows rows of n floats (src, row stride src_stride floats) to rows of `type` at dst
/// (row stride dst_stride bytes): writing K/V cache rows. Byte-identical to quant's
/// quantize_row (mnemo/quant.h), with SIMD for F16, BF16, Q8_0 and Q4_0 (the reference for the
/// other types quant can quantize). NaN inputs may give other NaN bit patterns than quant's.
void quantize_rows(GgmlType type, const float* src, int64_t src_stride, int64_t n_rows, int64_t n,
                   void* dst, size_t dst_stride, ThreadPool* pool);

// ---------------------------------------------------------------------------------------------
// Normalization, softmax, activations, elementwise

/// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), per row:
///   y[i] = x[i] / sqrt(mean_j(x[j]^2) + eps) * (weight ? weight[i] : 1).
///   x, y: [n_rows x n]; y may alias x. weight: [n] or null.
/// Gemma's RMSNorm computes (1 + w) in its reference code; GGUF converters store 1 + w, so the
/// same function serves Gemma (final/pre/post norms and per-head QK-norm with n = head_dim).
void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y);

/// Softmax over each row, in place: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max).
///   x: [n_rows x n]. Entries equal to -inf get 0; a row of all -inf becomes all 0.
void softmax(float* x, int64_t n_rows, int64_t n);

/// SiLU-gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer"):
///   out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).  n elements; out may alias.
/// With a pool, long arrays are split over its threads in chunks of a multiple of every vector
/// length, so each element takes the same path (and bits) as without one.
void silu_mul(const float* gate, const float* up, int64_t n, float* out,
              ThreadPool* pool = nullptr);

/// GELU-gated linear unit with the tanh approximation of GELU (Hendrycks & Gimpel 2016,
/// "Gaussian Error Linear Units"), as ggml_gelu and Gemma's gelu_pytorch_tanh compute it:
///   gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))); out[i] = gelu(gate[i]) * up[i].
/// A pool splits long arrays as silu_mul's does.
void gelu_mul(const float* gate, const float* up, int64_t n, float* out,
              ThreadPool* pool = nullptr);

/// out[i] = silu(x[i]) / gelu(x[i]) (tanh approximation). n elements; out may alias x.
void silu(const float* x, int64_t n, float* out);
void gelu(const float* x, int64_t n, float* out);

/// Elementwise out[i] = a[i] + b[i] / a[i] * b[i]; out may alias a or b.
void add(const float* a, const float* b, int64_t n, float* out);
void mul(const float* a, const float* b, int64_t n, float* out);
/// x[i] *= s, in place.
void scale(float* x, int64_t n, float s);
/// Logit soft-capping (Gemma 2): x[i] = cap * tanh(x[i] / cap), in place; cap > 0.
void softcap(float* x, int64_t n, float cap);

// ---------------------------------------------------------------------------------------------
// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
// Position Embedding")

// RopeMode (which dimensions pair up): mnemo/rope.h.

/// The rotation of one layer. Pair i of a token at position p turns by the angle
///   theta_i(p) = p * freq_scale * freq_base^(-2i / n_dims),  i in [0, n_dims / 2).
/// freq_scale < 1 is linear position interpolation (Chen et al. 2023); dimensions at and past
/// n_dims (n_dims <= head_dim, even) are left as they are.
struct RopeParams {
  int64_t n_dims = 0;
  RopeMode mode = RopeMode::kNormal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
};

/// Floats per token in a rope table: 2 * n_dims.
inline int64_t rope_table_floats(const RopeParams& p) { return 2 * p.n_dims; }

/// Precomputes the cos/sin table of n_tokens positions, to share between Q and K and between
/// layers with the same RopeParams: table [n_tokens x rope_table_floats(p)]. Angles are computed
/// in double and rounded to float once.
void rope_table(const RopeParams& p, const int32_t* pos, int64_t n_tokens, float* table);

/// Rotates x in place with a table from rope_table():
///   x: [n_tokens x n_head x head_dim], token rows x_stride (>= n_head * head_dim) elements
///   apart, heads contiguous inside a token row.
void rope_apply(const RopeParams& p, const float* table, int64_t n_tokens, int64_t n_head,
                int64_t head_dim, float* x, int64_t x_stride);

/// rope_table + rope_apply with contiguous x, for one-off use (allocates the table).
void rope(const RopeParams& p, const int32_t* pos, int64_t n_tokens, int64_t n_head,
          int64_t head_dim, float* x);

/// Re-rotates cached K rows in place after their positions moved by delta[r] (the memory's
/// seq_add). Rotations compose (theta is linear in the position), so turning a row rotated at p
/// by theta(delta) gives the row rotated at p + delta. Each row holds n_head_kv * head_dim
/// elements of `type` (any type quant can both dequantize and quantize: f32, f16, bf16, q4_0,
/// q4_1, q5_0, q5_1, q8_0, iq4_nl); row r is at rows + r * row_stride bytes and is
/// dequantized, rotated and quantized back (quantized types pick up one more rounding).
void rope_shift(const RopeParams& p, GgmlType type, void* rows, size_t row_stride, int64_t n_rows,
                int64_t n_head_kv, int64_t head_dim, const int32_t* delta, ThreadPool* pool);

// ---------------------------------------------------------------------------------------------
// Attention over KV-cache rows

/// K and V of n_kv cache cells. Cell c's K row (n_head_kv * head_dim elements of k_type, head h
/// at element h * head_dim) starts at k + c * k_stride bytes. V likewise when v_head_stride is 0;
/// otherwise V is stored per head ("V planes"): head h's head_dim elements of cell c start at
/// v + h * v_head_stride + c * v_stride bytes (v_stride >= row_size(v_type, head_dim)), so that
/// a task accumulating one head's V reads one contiguous range. Non-owning.
/// order (optional, n_order entries, each in [0, n_kv), no repeats): the cells attention visits,
/// in this order; cells not listed are not seen by any row. The memory lists the occupied
/// cells by position (KvCacheContext::build_order), which makes a row's result independent of
/// where its cells lie in the cache. Null: cells 0, 1, ..., n_kv - 1.
struct KvView {
  GgmlType k_type = GgmlType::F16;
  const void* k = nullptr;
  size_t k_stride = 0;
  GgmlType v_type = GgmlType::F16;
  const void* v = nullptr;
  size_t v_stride = 0;
  int64_t n_kv = 0;
  const int32_t* order = nullptr;
  int64_t n_order = 0;
  size_t v_head_stride = 0;  // 0: V rows hold every head side by side; else bytes between heads
};

/// Shapes and constants of one attention call.
struct AttentionParams {
  int64_t n_tokens = 0;   // query rows
  int64_t n_head = 0;     // query heads
  int64_t n_head_kv = 0;  // K/V heads; n_head % n_head_kv == 0 (grouped-query attention)
  int64_t head_dim = 0;   // a multiple of 32 for quantized cache types
  float scale = 1.0f;     // score = scale * q.k (usually 1 / sqrt(head_dim))
  float softcap = 0.0f;   // > 0: score = softcap * tanh(score / softcap) before the mask
};

/// Whether attention() reads K/V of this cache type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, IQ4_NL.
bool attention_supports(GgmlType type);

/// out = softmax(scale * Q K^T + mask) V per head, query head h using K/V head
/// h / (n_head / n_head_kv).
///   q:    [n_tokens x n_head x head_dim] float, contiguous.
///   mask: [n_tokens x n_kv] float, row stride mask_stride elements, added to the scores; 0 or
///         -inf in practice (causal, sequence and window masks from the memory context). Cells
///         that are -inf are skipped without reading K or V. Null: every cell is visible.
///   out:  [n_tokens x n_head x head_dim] float. A row whose cells are all masked gets zeros.
/// K/V are read in place in their cache type, never copied whole. For quantized K, Q is
/// quantized once per call to 8 bits per 32 elements and scores use integer dot products; V rows
/// are dequantized exactly to float, a tile at a time. Softmax with the row's exact maximum
/// (scores kept per row, then weights exp(s - max)), and the weighted sum of V as one sequential
/// chain per output element in visiting order: a row's output is bit-identical whatever the
/// other rows of the call, the cells other sequences hold, or the thread count (the split of
/// the work never changes an element's arithmetic; kernels/attention-inl.h).
void attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, ThreadPool* pool);

}  // namespace kernels
}  // namespace mnemo
