// Module-private declarations of kernels/: argument structs, per-thread scratch, and the
// per-weight-type entry points (one translation unit per type: matmul_<type>.cc), each of which
// dispatches the whole operation to the best Highway target once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/kernels.h"
#include "mnemo/quant.h"
#include "mnemo/thread_pool.h"

namespace mnemo::kernels::internal {

/// Rows of the unpacked (dot-friendly) operands are padded to this many elements: one 512-bit
/// vector of bytes, so every target's inner loop runs without a tail.
inline constexpr int64_t kPadElems = 64;
/// Offset / scale arrays of floats are padded to 16 (one 512-bit vector of floats).
inline constexpr int64_t kPadFloats = 16;

inline constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
inline constexpr int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

/// One matmul call, already validated (see kernels.h matmul()).
struct MatmulArgs {
  GgmlType type = GgmlType::F32;
  const uint8_t* w = nullptr;  // [n_out rows of w_row_bytes]
  size_t w_row_bytes = 0;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const float* x = nullptr;  // [n_tokens x n_in], row stride x_stride
  int64_t x_stride = 0;
  int64_t n_tokens = 0;
  float* y = nullptr;  // [n_tokens x n_out], row stride y_stride
  int64_t y_stride = 0;
  ThreadPool* pool = nullptr;
};

/// The arguments of w times x -> y (x: [n_tokens x w.n_in], row stride x_stride; y: [n_tokens x
/// w.n_out], row stride y_stride). Packing passes the weight alone (x, y null, n_tokens 0).
MatmulArgs matmul_args(const WeightMatrix& w, const float* x = nullptr, int64_t x_stride = 0,
                       int64_t n_tokens = 0, float* y = nullptr, int64_t y_stride = 0,
                       ThreadPool* pool = nullptr);

/// A growable 64-byte-aligned buffer; contents are undefined after a call that grows it.
class Scratch {
 public:
  /// At least `bytes` bytes, 64-byte aligned, valid until the next call on this object.
  void* get(size_t bytes);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t capacity_ = 0;
};

/// Per-thread scratch buffers. Each slot is used at one level only, so a task (which may run on
/// the calling thread) never clobbers the buffers its caller set up.
enum ScratchSlot : int {
  kSlotCall = 0,  // per call, owned by the calling thread (quantized activations, partials)
  kSlotRows = 1,  // per task: unpacked weight rows / K rows
  kSlotTask = 2,  // per task: scores, dequantized V rows
  kNumSlots = 3,
};
Scratch& thread_scratch(ScratchSlot slot);

/// Runs fn(task, thread) for task in [0, n_tasks) on `pool`, or inline when pool is null.
template <class F>
void parallel_for(ThreadPool* pool, int64_t n_tasks, F&& fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i, 0);
  } else {
    pool->parallel_for(n_tasks, fn);
  }
}

inline int n_threads_of(const ThreadPool* pool) { return pool ? pool->n_threads() : 1; }

/// Times one matmul() call into the set_matmul_timing total (kernels.h) when timing is on;
/// calls nested in a timed one (a packed matrix read through its source) are not counted again.
class MatmulTimer {
 public:
  MatmulTimer();
  ~MatmulTimer();
  MatmulTimer(const MatmulTimer&) = delete;
  MatmulTimer& operator=(const MatmulTimer&) = delete;

 private:
  static constexpr int64_t kOff = -1;     // timing was off: nothing to undo
  static constexpr int64_t kNested = -2;  // inside a timed call: counted by that one
  int64_t t0_ns_ = kOff;                  // else the start of this call (steady clock, ns)
};

/// Guided self-scheduling (Polychronopoulos & Kuck, 1987) of n_items items over n_threads
/// threads: task i covers items [bound[i], bound[i + 1]), each task a 1 / (2 n_threads) share of
/// the items not yet handed out (at least one), the last of kMaxTasks taking what is left.
/// Decoding's weight streams use it: large contiguous tasks first, one-item tasks at the end,
/// so the threads finish within about one item of each other. n_items >= 0, n_threads >= 1.
struct GuidedTasks {
  static constexpr int64_t kMaxTasks = 256;
  int64_t bound[kMaxTasks + 1];
  int64_t n_tasks = 0;

  GuidedTasks(int64_t n_items, int n_threads) {
    bound[0] = 0;
    for (int64_t i = 0; i < n_items;) {
      const int64_t left = n_items - i;
      i += n_tasks + 1 == kMaxTasks ? left : ceil_div(left, 2 * int64_t{n_threads});
      bound[++n_tasks] = i;
    }
  }
};

/// The tasks of a packed matmul over row groups and token chunks. On several threads, decoding
/// (at most 4 tokens) and any call whose tokens are not split (n_token_tasks 1) take
/// GuidedTasks over the groups, every token in each task: each thread streams long runs of
/// consecutive groups, which the hardware prefetcher follows, instead of a few groups per task
/// that start cold. Otherwise ceil(n_groups / groups_per_task) x n_token_tasks tasks of
/// groups_per_task groups and tokens_per_task tokens, the group chunk varying fastest. All
/// counts >= 1 (n_groups >= 0).
class GroupTokenTasks {
 public:
  GroupTokenTasks(int64_t n_groups, int64_t n_tokens, int n_threads, int64_t groups_per_task,
                  int64_t n_token_tasks, int64_t tokens_per_task)
      : guided_(n_threads > 1 && (n_tokens <= 4 || n_token_tasks == 1)),
        gt_(guided_ ? n_groups : 0, n_threads),
        n_groups_(n_groups),
        n_tokens_(n_tokens),
        groups_per_task_(groups_per_task),
        n_group_tasks_(ceil_div(n_groups, groups_per_task)),
        tokens_per_task_(tokens_per_task),
        n_tasks_(guided_ ? gt_.n_tasks : n_group_tasks_ * n_token_tasks) {}

  int64_t n_tasks() const { return n_tasks_; }

  /// Groups [*g0, *g1) and tokens [*t0, *t1) of task `task` < n_tasks().
  void range(int64_t task, int64_t* g0, int64_t* g1, int64_t* t0, int64_t* t1) const {
    if (guided_) {
      *g0 = gt_.bound[task];
      *g1 = gt_.bound[task + 1];
      *t0 = 0;
      *t1 = n_tokens_;
      return;
    }
    *g0 = (task % n_group_tasks_) * groups_per_task_;
    *g1 = std::min(n_groups_, *g0 + groups_per_task_);
    *t0 = (task / n_group_tasks_) * tokens_per_task_;
    *t1 = std::min(n_tokens_, *t0 + tokens_per_task_);
  }

 private:
  bool guided_;
  GuidedTasks gt_;
  int64_t n_groups_, n_tokens_, groups_per_task_, n_group_tasks_, tokens_per_task_, n_tasks_;
};

/// One row of a RoPE table (kernels.h rope_table) for position `pos`: angles in double, cos and
/// sin rounded to float once.
void rope_table_row(const RopeParams& p, double pos, float* row);

// ---- packed weights (kernels.h PackedMatrix; layout in packed-inl.h) -----------------------

/// How the quants of a packed format are stored: nibbles (U4), nibbles and fifth-bit masks (U5),
/// nibbles and high bit pairs (U6), or bytes (U8); packed-inl.h has the bytes.
enum PackKind : int { kPackU4 = 4, kPackU5 = 5, kPackU6 = 6, kPackU8 = 8 };

/// The packed formats (PackedMatrix::format_).
enum class PackedFormat : int {
  kNone = 0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kIQ4_NL,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

struct PackedFormatInfo {
  int kind = kPackU8;
  int sub = 32;  // S: elements per sub-block (one scale per row and sub-block)
  // true: an fp16 scale (and offset) per row and sub-block; false (K-quants): the GGUF's own
  // scales, an 8-bit scale (and min) per row and sub-block and fp16 super-block scales d (and
  // dmin) per row and 256 elements, multiplied when read (the products are exact in f32).
  bool f16_scales = true;
  int offset = 0;  // > 0: element = d (u - offset); -1: d u + c (c stored); 0: d u
};

/// The packed format of a weight type, kNone where there is none (in either layout: the 8-row
/// layout packs the same types).
PackedFormat packed_format_of(GgmlType type);
PackedFormatInfo packed_format_info(PackedFormat f);

/// Byte layout of one 16-row group of a packed matrix: n_sub / subs_per_span spans, each
///   fp16 scales: [quants of its sub-blocks][scales][offsets]   (one span per group)
///   K-quants:    [super][scales][offsets][quants of its 256 / S sub-blocks]
/// (packed-inl.h has the bytes; a K-quant span's scales come first, so that reading ahead of
/// the quants brings the next span's scales in time).
struct PackedLayout {
  int64_t n_sub = 0;            // sub-blocks per row
  int64_t sub_quant_bytes = 0;  // quants of one sub-block (a multiple of 64)
  int64_t subs_per_span = 0;    // n_sub (one span) for fp16 scales; 256 / S for K-quants
  int64_t span_bytes = 0;       // a multiple of 64
  int64_t quants_offset = 0;    // from the span start (a multiple of 64)
  int64_t scales_offset = 0;    // per sub-block 16 fp16 d or 16 int8 sc
  int64_t offsets_offset = 0;   // per sub-block 16 fp16 c or 16 uint8 m (offset -1 only)
  int64_t super_offset = 0;     // K-quants: 16 fp16 super-block d, then 16 fp16 dmin
  int64_t group_bytes = 0;      // a multiple of 64
};
PackedLayout packed_layout(PackedFormat f, int64_t n_in);

/// Whether this CPU and OS run AMX-INT8 tile instructions (CPUID, and the Linux permission for
/// the tile data state, requested once per process).
bool amx_available();
/// Tests: with true, amx_available() answers false (to cover the non-AMX prompt path).
void set_amx_disabled_for_test(bool disabled);

/// How far ahead of the bytes being read the packed tiles' far software prefetch (T2, into L2)
/// reads, in bytes, set once at start-up: 16 KiB on AMD CPUs, 4 KiB on others. Measured with
/// 2 threads on one 1.5B model (docs/benchmarks.md, "The far weight prefetch per CPU kind"): on
/// an AMD EPYC Zen 4 generation reached 81-91% of the read bandwidth with 4 KiB and mostly
/// 92-105% with 16 KiB; on an Intel Xeon 4 KiB beat 3, 5, 6 and 8. MNEMO_PREFETCH_FAR=BYTES (64
/// to 1048576, rounded down to whole lines) overrides it, for such measurements; another value
/// is ignored with a warning on stderr.
extern const int64_t g_far_prefetch_bytes;

/// The packed layouts (PackedMatrix::layout_): kRows16 is the 16-row VNNI layout of
/// packed-inl.h (AVX3_DL), kRows8 the 8-row layout of packed256-inl.h (AVX2, AVX3).
enum class PackedLayoutKind : int { kNone = 0, kRows16 = 1, kRows8 = 2 };
/// The layout the dispatched target's packed kernels read (kNone: no packed kernels).
PackedLayoutKind packed_layout_kind();

/// Whether the dispatched target has packed kernels (else matmul(PackedMatrix) reads the
/// source).
bool packed_kernels_active();

/// Whether the dispatched target multiplies quantized weights with 8-bit integer dots (and so
/// quantizes activations); false on the scalar fallback, which dequantizes to float.
bool int_dot_active();

// Per-weight-type matmul entry points (matmul_<type>.cc), each one HWY_DYNAMIC_DISPATCH.
void matmul_f32(const MatmulArgs& args);
void matmul_f16(const MatmulArgs& args);
void matmul_bf16(const MatmulArgs& args);
void matmul_q4_0(const MatmulArgs& args);
void matmul_q4_1(const MatmulArgs& args);
void matmul_q5_0(const MatmulArgs& args);
void matmul_q5_1(const MatmulArgs& args);
void matmul_q8_0(const MatmulArgs& args);
void matmul_iq4_nl(const MatmulArgs& args);
void matmul_q4_K(const MatmulArgs& args);
void matmul_q5_K(const MatmulArgs& args);
void matmul_q6_K(const MatmulArgs& args);

}  // namespace mnemo::kernels::internal
