// Shared pieces of the forward pass: embeddings, RoPE tables, K/V writes into the cache,
// attention per stream, the output projection, and K re-rotation for position shifts.
#include "mnemo/forward.h"

#include <algorithm>
#include <cstring>

#include "mnemo/kv_cache.h"
#include "mnemo/kv_rotation.h"
#include "mnemo/quant.h"

namespace mnemo {
namespace {

// Output rows are projected in chunks so the temporary logits stay small even for a 262k vocab.
constexpr int64_t kOutputChunk = 16;

// --- KV rotation (include/mnemo/kv_rotation.h) ----------------------------------------------
// Streams whose rows are stored Hadamard-rotated (KvStorage::rotation(stream) = head size d):
// K and V rows are rotated per head before they are written, Q rows per head before attention,
// and the attention output is rotated back (H_d is its own inverse); scores are unchanged.

// Rotated copy of n floats (scratch reused across calls; one Forward per thread).
const float* rotated(const float* src, int64_t n, uint32_t rot) {
  thread_local std::vector<float> tmp;
  tmp.assign(src, src + n);
  hadamard_rotate(tmp.data(), n, rot);
  return tmp.data();
}

// K re-rotation after a position shift for a rotated stream: un-rotate, RoPE by delta, rotate.
void rope_shift_rotated(const kernels::RopeParams& p, const KvView& kview, uint32_t rot,
                        const std::vector<uint32_t>& cells, const std::vector<int32_t>& deltas,
                        int64_t n_head_kv, int64_t head_dim) {
  std::vector<float> row(kview.n_embd);
  for (size_t j = 0; j < cells.size(); ++j) {
    uint8_t* dst = kview.row(cells[j]);
    Status st = dequantize_row(kview.type, dst, row.data(), kview.n_embd);
    CHECK(st.ok()) << st.to_string();
    hadamard_rotate(row.data(), kview.n_embd, rot);
    kernels::rope_shift(p, GgmlType::F32, row.data(), kview.n_embd * sizeof(float), 1, n_head_kv,
                        head_dim, &deltas[j], nullptr);
    hadamard_rotate(row.data(), kview.n_embd, rot);
    st = quantize_row(kview.type, row.data(), dst, kview.n_embd);
    CHECK(st.ok()) << st.to_string();
  }
}
// --- end KV rotation -------------------------------------------------------------------------

// Writes one row of n floats into a cache row of `type` (f32: a copy; others: quantize_row),
// rotated per head of `rot` elements first when rot != 0.
void write_cache_row(GgmlType type, const float* src, uint8_t* dst, int64_t n, uint32_t rot) {
  if (rot != 0) src = rotated(src, n, rot);
  if (type == GgmlType::F32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  // SIMD, byte-identical to quant's quantize_row; types and widths were validated when the
  // cache was made.
  kernels::quantize_rows(type, src, n, 1, n, dst, row_size(type, n), nullptr);
}

bool rows_contiguous(const std::vector<uint32_t>& rows) {
  for (size_t j = 1; j < rows.size(); ++j) {
    if (rows[j] != rows[0] + j) return false;
  }
  return true;
}

}  // namespace

Forward::Forward(const Model& model, ThreadPool* pool, uint32_t n_ubatch_max)
    : model_(model), hp_(model.hparams()), pool_(pool), n_ubatch_max_(n_ubatch_max) {
  const size_t T = n_ubatch_max;
  x_.resize(T * hp_.n_embd);
  h_.resize(T * std::max<size_t>(hp_.n_embd, size_t(hp_.n_head) * hp_.head_dim_v));
  q_.resize(T * hp_.n_head * hp_.head_dim_k);
  k_.resize(T * hp_.n_embd_k_gqa());
  v_.resize(T * hp_.n_embd_v_gqa());
  attn_.resize(T * hp_.n_head * hp_.head_dim_v);
  gate_.resize(T * hp_.n_ff);
  up_.resize(T * hp_.n_ff);
  rope_tables_.resize(2);
}

kernels::WeightMatrix Forward::matrix(const Weight& w) {
  return kernels::WeightMatrix{w.type, w.data, w.ne1, w.ne0};
}

void Forward::matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) {
  if (w.packed != nullptr) {
    kernels::matmul(*w.packed, x, n_tokens, y, pool_);
  } else {
    kernels::matmul(matrix(w), x, n_tokens, y, pool_);
  }
}

void Forward::add_bias(const Weight& b, float* y, int64_t n_tokens) {
  if (!b.present()) return;
  for (int64_t t = 0; t < n_tokens; ++t) kernels::add(y + t * b.ne0, b.f32(), b.ne0, y + t * b.ne0);
}

kernels::RopeParams Forward::rope_params(uint32_t il) const {
  kernels::RopeParams p;
  p.n_dims = hp_.rope_dim;
  p.mode = hp_.rope_mode;
  const bool swa = hp_.is_swa_layer(il);
  p.freq_base = swa ? hp_.rope_freq_base_swa : hp_.rope_freq_base;
  p.freq_scale = swa ? 1.0f : hp_.rope_freq_scale;  // local layers are not position-scaled
  return p;
}

const float* Forward::rope_table_for(uint32_t il, const Ubatch& ub) {
  return rope_tables_[hp_.is_swa_layer(il) ? 1 : 0].data();
}

const std::vector<float>& Forward::mask_for(const KvCacheContext& kv, size_t placement_index) {
  auto key = std::make_pair(&kv, placement_index);
  auto it = masks_.find(key);
  if (it != masks_.end()) return it->second;
  std::vector<float>& m = masks_[key];
  kv.build_mask(placement_index, &m);
  return m;
}

const std::vector<int32_t>& Forward::order_for(const KvCacheContext& kv, size_t placement_index) {
  auto key = std::make_pair(&kv, placement_index);
  auto it = orders_.find(key);
  if (it != orders_.end()) return it->second;
  std::vector<int32_t>& o = orders_[key];
  kv.build_order(placement_index, &o);
  return o;
}

void Forward::attention(uint32_t il, const KvCacheContext& kv, const Ubatch& ub, const float* q,
                        const float* k, const float* v, float* out) {
  const int64_t n_embd_k = hp_.n_embd_k_gqa();
  const int64_t n_embd_v = hp_.n_embd_v_gqa();
  const int64_t q_width = int64_t(hp_.n_head) * hp_.head_dim_k;
  const int64_t o_width = int64_t(hp_.n_head) * hp_.head_dim_v;
  const auto& placement = kv.placement();

  // 1. The ubatch's K and V rows go into the cells the placement chose.
  for (const StreamSlots& ss : placement) {
    const KvView kview = kv.k_view(il, ss.stream);
    const KvView vview = kv.v_view(il, ss.stream);
    const uint32_t rot = kv.cache().storage().rotation(ss.stream);  // KV rotation
    for (size_t j = 0; j < ss.rows.size(); ++j) {
      const uint32_t r = ss.rows[j];
      write_cache_row(kview.type, k + r * n_embd_k, kview.row(ss.cells[j]), n_embd_k, rot);
      write_cache_row(vview.type, v + r * n_embd_v, vview.row(ss.cells[j]), n_embd_v, rot);
    }
  }

  // 2. Each stream's rows attend over that stream's cells.
  for (size_t i = 0; i < placement.size(); ++i) {
    const StreamSlots& ss = placement[i];
    const int64_t n = int64_t(ss.rows.size());
    const uint32_t n_kv = kv.n_kv(ss.stream);
    const std::vector<float>& mask = mask_for(kv, i);
    const std::vector<int32_t>& order = order_for(kv, i);
    const KvView kview = kv.k_view(il, ss.stream);
    const KvView vview = kv.v_view(il, ss.stream);

    const uint32_t rot = kv.cache().storage().rotation(ss.stream);  // KV rotation: Q, out
    const bool contiguous = rows_contiguous(ss.rows) && rot == 0;
    const float* qp = q + int64_t(ss.rows[0]) * q_width;
    float* op = out + int64_t(ss.rows[0]) * o_width;
    if (!contiguous) {
      qg_.resize(size_t(n) * q_width);
      og_.resize(size_t(n) * o_width);
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(&qg_[j * q_width], q + int64_t(ss.rows[j]) * q_width, q_width * sizeof(float));
      }
      if (rot != 0) hadamard_rotate(qg_.data(), n * q_width, rot);
      qp = qg_.data();
      op = og_.data();
    }
    kernels::KvView kvv;
    kvv.k_type = kview.type;
    kvv.k = kview.data;
    kvv.k_stride = kview.row_bytes;
    kvv.v_type = vview.type;
    kvv.v = vview.data;
    kvv.v_stride = vview.row_bytes;
    kvv.n_kv = n_kv;
    kvv.order = order.data();
    kvv.n_order = int64_t(order.size());
    kernels::AttentionParams p;
    p.n_tokens = n;
    p.n_head = hp_.n_head;
    p.n_head_kv = hp_.n_head_kv;
    p.head_dim = hp_.head_dim_k;
    p.scale = hp_.attn_scale;
    kernels::attention(p, qp, kvv, mask.data(), n_kv, op, pool_);
    if (!contiguous) {
      if (rot != 0) hadamard_rotate(og_.data(), n * o_width, rot);
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(out + int64_t(ss.rows[j]) * o_width, &og_[j * o_width], o_width * sizeof(float));
      }
    }
  }
}

Status Forward::run(const MemoryContext& mctx, const Ubatch& ub, std::span<float* const> out_rows,
                    const AbortFn& abort) {
  const int64_t T = ub.n_tokens();
  CHECK(T > 0 && T <= int64_t(n_ubatch_max_)) << "ubatch of " << T << " rows";
  CHECK_EQ(out_rows.size(), size_t(ub.n_outputs()));
  n_tokens_ = uint32_t(T);
  masks_.clear();
  orders_.clear();

  // Embeddings.
  if (!ub.token.empty()) {
    kernels::get_rows(matrix(model_.token_embd()), ub.token.data(), T, x_.data());
  } else {
    CHECK_EQ(ub.n_embd, hp_.n_embd);
    std::memcpy(x_.data(), ub.embd.data(), size_t(T) * hp_.n_embd * sizeof(float));
  }
  if (hp_.embd_scale != 1.0f) kernels::scale(x_.data(), T * hp_.n_embd, hp_.embd_scale);

  // RoPE tables for this ubatch's positions (global and sliding-window layers differ in base).
  rope_pos_.assign(ub.pos.begin(), ub.pos.end());
  for (uint32_t swa = 0; swa < 2; ++swa) {
    // Layer 0 is a sliding-window layer in gemma3; find one layer of each kind.
    int64_t il = -1;
    for (uint32_t l = 0; l < hp_.n_layer; ++l) {
      if (hp_.is_swa_layer(l) == (swa == 1)) {
        il = l;
        break;
      }
    }
    if (il < 0 || hp_.rope_dim == 0) continue;  // rope_dim 0: no RoPE (granitehybrid)
    const kernels::RopeParams p = rope_params(uint32_t(il));
    rope_tables_[swa].resize(size_t(T) * kernels::rope_table_floats(p));
    kernels::rope_table(p, rope_pos_.data(), T, rope_tables_[swa].data());
  }

  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (abort && abort()) return Status::aborted("decode aborted by the caller");
    if (hp_.has_recurrent_layers()) {  // mamba2 / granitehybrid (src/model/mamba2.cc)
      ssm_block(il, mctx, ub);
      continue;
    }
    const KvCacheContext* kv = mctx.kv_for_layer(il);
    CHECK(kv != nullptr) << "no KV context for layer " << il;
    if (hp_.arch == Arch::kGemma3) {
      gemma3_layer(il, *kv, ub);
    } else {
      llama_layer(il, *kv, ub);
    }
  }

  // Final norm and output projection, only for the rows that want logits.
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_vocab = hp_.n_vocab;
  std::vector<float> chunk_logits;
  std::vector<float> normed;
  int64_t k = 0;
  std::vector<uint32_t> out_idx;
  for (uint32_t r = 0; r < T; ++r) {
    if (ub.output[r]) out_idx.push_back(r);
  }
  for (size_t c0 = 0; c0 < out_idx.size(); c0 += kOutputChunk) {
    const int64_t n = std::min<int64_t>(kOutputChunk, int64_t(out_idx.size() - c0));
    normed.resize(size_t(n) * n_embd);
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(&normed[j * n_embd], &x_[size_t(out_idx[c0 + j]) * n_embd], n_embd * sizeof(float));
    }
    kernels::rms_norm(normed.data(), model_.output_norm().f32(), hp_.rms_eps, n, n_embd,
                      normed.data());
    chunk_logits.resize(size_t(n) * n_vocab);
    matmul(model_.output(), normed.data(), n, chunk_logits.data());
    if (hp_.logit_scale != 1.0f) {  // granitehybrid
      kernels::scale(chunk_logits.data(), n * n_vocab, 1.0f / hp_.logit_scale);
    }
    for (int64_t j = 0; j < n; ++j, ++k) {
      std::memcpy(out_rows[k], &chunk_logits[j * n_vocab], n_vocab * sizeof(float));
    }
  }
  return Status();
}

void Forward::apply_shifts(const MemoryContext& update) {
  if (hp_.rope_dim == 0) return;  // no RoPE (granitehybrid): K does not depend on pos
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    const KvCacheContext* kv = update.kv_for_layer(il);
    if (kv == nullptr) continue;
    const kernels::RopeParams p = rope_params(il);
    for (const auto& ss : kv->shifts()) {
      const KvView kview = kv->k_view(il, ss.stream);
      if (const uint32_t rot = kv->cache().storage().rotation(ss.stream); rot != 0) {
        rope_shift_rotated(p, kview, rot, ss.cells, ss.deltas, hp_.n_head_kv, hp_.head_dim_k);
        continue;
      }
      // Runs of consecutive cells are rotated with one call.
      size_t j = 0;
      while (j < ss.cells.size()) {
        size_t e = j + 1;
        while (e < ss.cells.size() && ss.cells[e] == ss.cells[e - 1] + 1) ++e;
        kernels::rope_shift(p, kview.type, kview.row(ss.cells[j]), kview.row_bytes, int64_t(e - j),
                            hp_.n_head_kv, hp_.head_dim_k, &ss.deltas[j], e - j > 64 ? pool_ : nullptr);
        j = e;
      }
    }
  }
}

}  // namespace mnemo
