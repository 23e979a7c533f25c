// KvCacheContext's reads and writes of K/V rows for the model (kv_cache.h, "What the model reads
// and writes"): storing a ubatch's rows in the cache's K/V types and rotation, handing out the
// views, masks and visiting order attention reads, and re-rotating shifted K.
//
// KV rotation (kv_rotation.h): a stream may store its rows Hadamard-rotated per head (rotation =
// head size d). Rows are rotated before they are written; attention rotates Q the same way and
// the output back (H_d is its own inverse), so scores are unchanged.
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "memory/kv_cache.h"
#include "memory/kv_rotation.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"

namespace mnemo {
namespace {

// Writes one row of n floats into a cache row of `type` (f32: a copy; others: the SIMD
// quantize_rows, byte-identical to quant_row), rotated per head of `rot` elements first when
// rot != 0. tmp: scratch for the rotated copy.
void write_row(GgmlType type, const float* src, uint8_t* dst, int64_t n, uint32_t rot,
               std::vector<float>* tmp) {
  if (rot != 0) {
    tmp->assign(src, src + n);
    hadamard_rotate(tmp->data(), n, rot);
    src = tmp->data();
  }
  if (type == GgmlType::F32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  kernels::quantize_rows(type, src, n, 1, n, dst, row_size(type, n), nullptr);
}

}  // namespace

void KvCacheContext::store_kv(uint32_t il, const float* k, const float* v) const {
  std::vector<float> tmp;
  std::vector<uint8_t> v_row;  // a V row bound for planes
  for (const StreamSlots& ss : placement()) {
    const KvRows kr = k_view(il, ss.stream);
    const KvRows vr = v_view(il, ss.stream);
    const uint32_t rot = cache_->storage().rotation(ss.stream);
    v_row.resize(vr.is_rows() ? 0 : vr.row_bytes);
    for (size_t j = 0; j < ss.rows.size(); ++j) {
      const uint32_t r = ss.rows[j];
      write_row(kr.type, k + size_t(r) * kr.n_embd, kr.row(ss.cells[j]), kr.n_embd, rot, &tmp);
      if (vr.is_rows()) {
        write_row(vr.type, v + size_t(r) * vr.n_embd, vr.row(ss.cells[j]), vr.n_embd, rot, &tmp);
      } else {
        write_row(vr.type, v + size_t(r) * vr.n_embd, v_row.data(), vr.n_embd, rot, &tmp);
        vr.set_rows(ss.cells[j], 1, v_row.data());
      }
    }
  }
}

KvCacheContext::AttentionInput KvCacheContext::attention_input(uint32_t il, size_t i) const {
  const std::vector<StreamSlots>& pl = placement();
  CHECK(i < pl.size()) << "placement entry " << i << " of " << pl.size();
  if (inputs_ubatch_ != cur_) {
    inputs_ubatch_ = cur_;
    masks_.assign(pl.size(), {});
    orders_.assign(pl.size(), {});
  }
  const uint32_t stream = pl[i].stream;
  const uint32_t n_kv = this->n_kv(stream);
  if (masks_[i].empty()) {
    build_mask(i, &masks_[i]);
    build_order(i, &orders_[i]);
  }
  const KvRows kr = k_view(il, stream);
  const KvRows vr = v_view(il, stream);
  AttentionInput in;
  in.kv.k_type = kr.type;
  in.kv.k = kr.data;
  in.kv.k_stride = kr.row_bytes;
  in.kv.v_type = vr.type;
  in.kv.v = vr.data;
  in.kv.v_stride = vr.cell_stride();
  in.kv.v_head_stride = vr.plane_bytes();
  in.kv.n_kv = n_kv;
  in.kv.order = orders_[i].data();
  in.kv.n_order = int64_t(orders_[i].size());
  in.mask = masks_[i].data();
  in.mask_stride = n_kv;
  in.rotation = cache_->storage().rotation(stream);
  return in;
}

void KvCacheContext::apply_k_shifts(uint32_t il, const kernels::RopeParams& p, int64_t n_head_kv,
                                    int64_t head_dim, ThreadPool* pool) const {
  std::vector<float> row;
  for (const StreamShifts& ss : shifts_) {
    const KvRows kr = k_view(il, ss.stream);
    if (const uint32_t rot = cache_->storage().rotation(ss.stream); rot != 0) {
      // Un-rotate, RoPE by delta, rotate (one row at a time; the rotation is per head).
      row.resize(kr.n_embd);
      for (size_t j = 0; j < ss.cells.size(); ++j) {
        uint8_t* dst = kr.row(ss.cells[j]);
        Status st = dequantize_row(kr.type, dst, row.data(), kr.n_embd);
        CHECK(st.ok()) << st.to_string();
        hadamard_rotate(row.data(), kr.n_embd, rot);
        kernels::rope_shift(p, GgmlType::F32, row.data(), kr.n_embd * sizeof(float), 1, n_head_kv,
                            head_dim, &ss.deltas[j], nullptr);
        hadamard_rotate(row.data(), kr.n_embd, rot);
        st = quantize_row(kr.type, row.data(), dst, kr.n_embd);
        CHECK(st.ok()) << st.to_string();
      }
      continue;
    }
    // Runs of consecutive cells are rotated with one call.
    size_t j = 0;
    while (j < ss.cells.size()) {
      size_t e = j + 1;
      while (e < ss.cells.size() && ss.cells[e] == ss.cells[e - 1] + 1) ++e;
      kernels::rope_shift(p, kr.type, kr.row(ss.cells[j]), kr.row_bytes, int64_t(e - j), n_head_kv,
                          head_dim, &ss.deltas[j], e - j > 64 ? pool : nullptr);
      j = e;
    }
  }
}

}  // namespace mnemo
