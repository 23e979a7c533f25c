// Attention over KV-cache rows: the per-target code is in attention-inl.h; this file compiles it
// once per Highway target and holds the public entry point (one dispatch per call).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/attention-inl.h"

#if HWY_ONCE
#include <algorithm>

#include "kernels/kernels.h"
#include "mnemo/check.h"

namespace mnemo::kernels {

HWY_EXPORT(Attention);

bool attention_supports(GgmlType type) { return is_kv_cache_type(type); }

void attention(const AttentionParams& p, const float* q, const KvView& kv, const float* mask,
               int64_t mask_stride, float* out, ThreadPool* pool) {
  CHECK(attention_supports(kv.k_type) && attention_supports(kv.v_type))
      << "attention: unsupported cache types " << type_name(kv.k_type) << " / "
      << type_name(kv.v_type);
  CHECK(p.n_head > 0 && p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0)
      << "attention: n_head " << p.n_head << " is not a multiple of n_head_kv " << p.n_head_kv;
  CHECK(p.head_dim > 0 && p.head_dim % block_size(kv.k_type) == 0 &&
        p.head_dim % block_size(kv.v_type) == 0)
      << "attention: head_dim " << p.head_dim << " does not fit the cache block size";
  CHECK(p.n_tokens >= 0 && kv.n_kv >= 0) << "attention: negative size";
  CHECK(mask == nullptr || mask_stride >= kv.n_kv) << "attention: mask_stride < n_kv";
  CHECK(kv.n_kv == 0 ||
        (kv.k_stride >= row_size(kv.k_type, p.n_head_kv * p.head_dim) &&
         kv.v_stride >=
             row_size(kv.v_type, kv.v_head_stride == 0 ? p.n_head_kv * p.head_dim : p.head_dim)))
      << "attention: K/V row stride smaller than a row";
  CHECK(kv.v_head_stride == 0 || kv.v_head_stride >= kv.n_kv * kv.v_stride)
      << "attention: V planes overlap (v_head_stride < n_kv * v_stride)";
  if (p.n_tokens == 0) return;
  if (kv.n_kv == 0) {
    std::fill(out, out + p.n_tokens * p.n_head * p.head_dim, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(Attention)(p, q, kv, mask, mask_stride, out, pool);
}

}  // namespace mnemo::kernels
#endif  // HWY_ONCE
