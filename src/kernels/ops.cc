// Small ops (RMSNorm, softmax, gates, elementwise, RoPE): the per-target code is in ops-inl.h;
// this file compiles it once per Highway target and holds the public entry points, each of which
// dispatches the whole operation once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/ops-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "mnemo/check.h"

namespace mnemo::kernels {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(Softmax);
HWY_EXPORT(SiluMul);
HWY_EXPORT(GeluMul);
HWY_EXPORT(Silu);
HWY_EXPORT(GeluOp);
HWY_EXPORT(AddOp);
HWY_EXPORT(MulOp);
HWY_EXPORT(ScaleOp);
HWY_EXPORT(SoftcapOp);
HWY_EXPORT(RopeApply);
HWY_EXPORT(RopeShift);
HWY_EXPORT(ToCacheRows);

void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y) {
  CHECK(n > 0 && n_rows >= 0) << "rms_norm: bad shape " << n_rows << " x " << n;
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, weight, eps, n_rows, n, y);
}

void softmax(float* x, int64_t n_rows, int64_t n) {
  CHECK(n > 0 && n_rows >= 0) << "softmax: bad shape " << n_rows << " x " << n;
  HWY_DYNAMIC_DISPATCH(Softmax)(x, n_rows, n);
}

namespace {
// Elementwise work over [0, n) in chunks of kChunk elements (a multiple of every vector length:
// the vector bodies see the same elements, only the array's own tail takes the scalar path).
template <class F>
void elementwise_chunks(int64_t n, ThreadPool* pool, F&& fn) {
  constexpr int64_t kChunk = 16384;
  if (pool == nullptr || n < 2 * kChunk) return fn(int64_t{0}, n);
  internal::parallel_for(pool, internal::ceil_div(n, kChunk), [&](int64_t task, int) {
    fn(task * kChunk, std::min(n, (task + 1) * kChunk));
  });
}
}  // namespace

void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  elementwise_chunks(n, pool, [&](int64_t i0, int64_t i1) {
    HWY_DYNAMIC_DISPATCH(SiluMul)(gate + i0, up + i0, i1 - i0, out + i0);
  });
}
void gelu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  elementwise_chunks(n, pool, [&](int64_t i0, int64_t i1) {
    HWY_DYNAMIC_DISPATCH(GeluMul)(gate + i0, up + i0, i1 - i0, out + i0);
  });
}
void silu(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(Silu)(x, n, out); }
void gelu(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(GeluOp)(x, n, out); }
void add(const float* a, const float* b, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AddOp)(a, b, n, out);
}
void mul(const float* a, const float* b, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(MulOp)(a, b, n, out);
}
void scale(float* x, int64_t n, float s) { HWY_DYNAMIC_DISPATCH(ScaleOp)(x, n, s); }
void softcap(float* x, int64_t n, float cap) {
  CHECK(cap > 0.0f) << "softcap: cap must be > 0, got " << cap;
  HWY_DYNAMIC_DISPATCH(SoftcapOp)(x, n, cap);
}

namespace {
void check_rope(const RopeParams& p, int64_t head_dim) {
  CHECK(p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= head_dim)
      << "rope: n_dims " << p.n_dims << " must be even and in (0, head_dim=" << head_dim << "]";
}
}  // namespace

namespace internal {
void rope_table_row(const RopeParams& p, double pos, float* row) {
  const int64_t h = p.n_dims / 2;
  float* c = row;
  float* s = row + p.n_dims;
  const double log_base = std::log(static_cast<double>(p.freq_base));
  for (int64_t i = 0; i < h; ++i) {
    const double theta =
        pos * static_cast<double>(p.freq_scale) *
        std::exp(-2.0 * static_cast<double>(i) / static_cast<double>(p.n_dims) * log_base);
    const float ci = static_cast<float>(std::cos(theta));
    const float si = static_cast<float>(std::sin(theta));
    if (p.mode == RopeMode::kNormal) {
      c[2 * i] = c[2 * i + 1] = ci;
      s[2 * i] = -si;
      s[2 * i + 1] = si;
    } else {
      c[i] = c[h + i] = ci;
      s[i] = -si;
      s[h + i] = si;
    }
  }
}
}  // namespace internal

void rope_table(const RopeParams& p, const int32_t* pos, int64_t n_tokens, float* table) {
  CHECK(p.n_dims > 0 && p.n_dims % 2 == 0) << "rope: n_dims " << p.n_dims << " must be even";
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::rope_table_row(p, static_cast<double>(pos[t]), table + t * rope_table_floats(p));
  }
}

void rope_apply(const RopeParams& p, const float* table, int64_t n_tokens, int64_t n_head,
                int64_t head_dim, float* x, int64_t x_stride) {
  check_rope(p, head_dim);
  CHECK(x_stride >= n_head * head_dim) << "rope_apply: x_stride " << x_stride << " too small";
  HWY_DYNAMIC_DISPATCH(RopeApply)(p, table, n_tokens, n_head, head_dim, x, x_stride);
}

void rope(const RopeParams& p, const int32_t* pos, int64_t n_tokens, int64_t n_head,
          int64_t head_dim, float* x) {
  std::vector<float> table(n_tokens * rope_table_floats(p));
  rope_table(p, pos, n_tokens, table.data());
  rope_apply(p, table.data(), n_tokens, n_head, head_dim, x, n_head * head_dim);
}

void rope_shift(const RopeParams& p, GgmlType type, void* rows, size_t row_stride, int64_t n_rows,
                int64_t n_head_kv, int64_t head_dim, const int32_t* delta, ThreadPool* pool) {
  check_rope(p, head_dim);
  CHECK(traits(type).can_dequantize && traits(type).can_quantize)
      << "rope_shift: cache type " << type_name(type) << " cannot be re-rotated";
  CHECK(row_stride >= row_size(type, n_head_kv * head_dim)) << "rope_shift: row_stride too small";
  HWY_DYNAMIC_DISPATCH(RopeShift)
  (p, type, rows, row_stride, n_rows, n_head_kv, head_dim, delta, pool);
}

void quantize_rows(GgmlType type, const float* src, int64_t src_stride, int64_t n_rows, int64_t n,
                   void* dst, size_t dst_stride, ThreadPool* pool) {
  CHECK(traits(type).can_quantize) << "quantize_rows: cannot quantize to " << type_name(type);
  CHECK(n % block_size(type) == 0 && src_stride >= n && dst_stride >= row_size(type, n))
      << "quantize_rows: bad shape n=" << n << " for " << type_name(type);
  HWY_DYNAMIC_DISPATCH(ToCacheRows)
  (type, src, src_stride, n_rows, n, static_cast<uint8_t*>(dst), dst_stride, pool);
}

}  // namespace mnemo::kernels
#endif  // HWY_ONCE
