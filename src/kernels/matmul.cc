// Public matmul / get_rows entry points: argument checks, then the per-weight-type translation
// unit (which dispatches to the best SIMD target). Also the per-thread scratch buffers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "mnemo/check.h"

namespace mnemo::kernels {
namespace internal {

void Scratch::Free::operator()(void* p) const { std::free(p); }

void* Scratch::get(size_t bytes) {
  if (bytes > capacity_) {
    // Grow geometrically so a slowly growing demand does not reallocate every call.
    const size_t cap = static_cast<size_t>(
        round_up(static_cast<int64_t>(std::max(bytes, capacity_ + capacity_ / 2)), 64));
    void* p = std::aligned_alloc(64, cap);
    CHECK(p != nullptr) << "out of memory allocating " << cap << " bytes of kernel scratch";
    data_.reset(p);
    capacity_ = cap;
  }
  return data_.get();
}

MatmulArgs matmul_args(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens,
                       float* y, int64_t y_stride, ThreadPool* pool) {
  MatmulArgs a;
  a.type = w.type;
  a.w = static_cast<const uint8_t*>(w.data);
  a.w_row_bytes = row_size(w.type, w.n_in);
  a.n_out = w.n_out;
  a.n_in = w.n_in;
  a.x = x;
  a.x_stride = x_stride;
  a.n_tokens = n_tokens;
  a.y = y;
  a.y_stride = y_stride;
  a.pool = pool;
  return a;
}

Scratch& thread_scratch(ScratchSlot slot) {
  thread_local Scratch scratch[kNumSlots];
  return scratch[slot];
}

}  // namespace internal

bool matmul_supports(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace {
std::atomic<bool> g_matmul_timing{false};
std::atomic<int64_t> g_matmul_ns{0};
thread_local int t_matmul_depth = 0;  // timed calls open on this thread

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void set_matmul_timing(bool on) { g_matmul_timing.store(on, std::memory_order_relaxed); }

int64_t matmul_time_ns() { return g_matmul_ns.load(std::memory_order_relaxed); }

internal::MatmulTimer::MatmulTimer() {
  if (!g_matmul_timing.load(std::memory_order_relaxed)) return;
  t0_ns_ = t_matmul_depth++ == 0 ? steady_ns() : kNested;
}

internal::MatmulTimer::~MatmulTimer() {
  if (t0_ns_ == kOff) return;
  --t_matmul_depth;
  if (t0_ns_ >= 0) g_matmul_ns.fetch_add(steady_ns() - t0_ns_, std::memory_order_relaxed);
}

void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool* pool) {
  const internal::MatmulTimer timer;
  CHECK(matmul_supports(w.type)) << "matmul: unsupported weight type " << type_name(w.type);
  CHECK(w.n_in > 0 && w.n_in % block_size(w.type) == 0)
      << "matmul: n_in " << w.n_in << " is not a multiple of the " << type_name(w.type)
      << " block size";
  CHECK(w.n_out >= 0 && n_tokens >= 0 && x_stride >= w.n_in && y_stride >= w.n_out)
      << "matmul: bad shape n_out=" << w.n_out << " n_tokens=" << n_tokens;
  if (w.n_out == 0 || n_tokens == 0) return;
  const internal::MatmulArgs a = internal::matmul_args(w, x, x_stride, n_tokens, y, y_stride, pool);
  switch (w.type) {
    case GgmlType::F32:
      return internal::matmul_f32(a);
    case GgmlType::F16:
      return internal::matmul_f16(a);
    case GgmlType::BF16:
      return internal::matmul_bf16(a);
    case GgmlType::Q4_0:
      return internal::matmul_q4_0(a);
    case GgmlType::Q4_1:
      return internal::matmul_q4_1(a);
    case GgmlType::Q5_0:
      return internal::matmul_q5_0(a);
    case GgmlType::Q5_1:
      return internal::matmul_q5_1(a);
    case GgmlType::Q8_0:
      return internal::matmul_q8_0(a);
    case GgmlType::IQ4_NL:
      return internal::matmul_iq4_nl(a);
    case GgmlType::Q4_K:
      return internal::matmul_q4_K(a);
    case GgmlType::Q5_K:
      return internal::matmul_q5_K(a);
    case GgmlType::Q6_K:
      return internal::matmul_q6_K(a);
    default:
      CHECK(false) << "unreachable";
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  matmul(w, x, w.n_in, n_tokens, y, w.n_out, pool);
}

void get_rows(const WeightMatrix& w, const int32_t* ids, int64_t n_ids, float* out) {
  CHECK(matmul_supports(w.type)) << "get_rows: unsupported type " << type_name(w.type);
  const size_t row_bytes = row_size(w.type, w.n_in);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t i = 0; i < n_ids; ++i) {
    CHECK(ids[i] >= 0 && ids[i] < w.n_out)
        << "get_rows: id " << ids[i] << " outside [0, " << w.n_out << ")";
    const Status st = dequantize_row(w.type, base + ids[i] * row_bytes, out + i * w.n_in, w.n_in);
    CHECK(st.ok()) << st.to_string();
  }
}

}  // namespace mnemo::kernels
