// Shared pieces of the forward pass: embeddings, RoPE tables, attention per stream (K/V rows
// handed to the memory context, views read from it), the output projection, and the K
// re-rotation for position shifts (done by the memory context).
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "memory/kv_cache.h"
#include "memory/kv_rotation.h"
#include "mnemo/quant.h"

namespace mnemo {
namespace {

// Output rows are projected in chunks so the temporary logits stay small even for a 262k vocab.
constexpr int64_t kOutputChunk = 16;

bool rows_contiguous(const std::vector<uint32_t>& rows) {
  for (size_t j = 1; j < rows.size(); ++j) {
    if (rows[j] != rows[0] + j) return false;
  }
  return true;
}

}  // namespace

Forward::ScratchSizes Forward::scratch_sizes(const Model& model, uint32_t n_ubatch_max) {
  const HParams& hp = model.hparams();
  // Scratch only for the blocks some layer has: the attention widths and feed_forward_length
  // are checked against the tensors of the layers that use them, so a key no layer uses (the
  // dense width of an all-experts model, the heads of an attention-free one) sizes nothing.
  bool attention = false, dense_ffn = false;
  for (const LayerWeights& l : model.layers()) {
    attention = attention || l.wq.present();
    dense_ffn = dense_ffn || l.ffn_gate.present();
  }
  // n_embd <= 2^20 and the other widths are bounded by the tensors of the layers using them,
  // n_ubatch_max < 2^32: each product fits in 64 bits.
  const uint64_t T = n_ubatch_max;
  const uint64_t n_q = attention ? uint64_t(hp.n_head) * hp.head_dim_k : 0;
  const uint64_t n_attn = attention ? uint64_t(hp.n_head) * hp.head_dim_v : 0;
  ScratchSizes s;
  s.x = size_t(T * hp.n_embd);
  s.h = size_t(T * std::max<uint64_t>(hp.n_embd, n_attn));
  s.q = size_t(T * n_q);
  s.k = attention ? size_t(T * hp.n_embd_k_gqa()) : 0;
  s.v = attention ? size_t(T * hp.n_embd_v_gqa()) : 0;
  s.attn = size_t(T * n_attn);
  s.gate = s.up = dense_ffn ? size_t(T * hp.n_ff) : 0;
  return s;
}

Forward::Forward(const Model& model, ThreadPool* pool, uint32_t n_ubatch_max)
    : model_(model), hp_(model.hparams()), pool_(pool), n_ubatch_max_(n_ubatch_max) {
  const ScratchSizes s = scratch_sizes(model, n_ubatch_max);
  x_.resize(s.x);
  h_.resize(s.h);
  q_.resize(s.q);
  k_.resize(s.k);
  v_.resize(s.v);
  attn_.resize(s.attn);
  gate_.resize(s.gate);
  up_.resize(s.up);
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

void Forward::norm_rows(const float* in, const Weight& w, float* out) {
  kernels::rms_norm(in, w.f32(), hp_.rms_eps, n_tokens_, hp_.n_embd, out);
}

void Forward::add_residual(float scale) {
  const int64_t n = int64_t{n_tokens_} * hp_.n_embd;
  if (scale != 1.0f) kernels::scale(h_.data(), n, scale);
  kernels::add(x_.data(), h_.data(), n, x_.data());
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

void Forward::attention(uint32_t il, const KvCacheContext& kv, const Ubatch& ub, const float* q,
                        const float* k, const float* v, float* out) {
  const int64_t q_width = int64_t(hp_.n_head) * hp_.head_dim_k;
  const int64_t o_width = int64_t(hp_.n_head) * hp_.head_dim_v;

  // 1. The ubatch's K and V rows go into the cells the placement chose (the memory stores them
  //    in its types and rotation).
  kv.store_kv(il, k, v);

  // 2. Each stream's rows attend over that stream's cells.
  const auto& placement = kv.placement();
  for (size_t i = 0; i < placement.size(); ++i) {
    const StreamSlots& ss = placement[i];
    const int64_t n = int64_t(ss.rows.size());
    const KvCacheContext::AttentionInput in = kv.attention_input(il, i);
    const bool contiguous = rows_contiguous(ss.rows) && in.rotation == 0;
    const float* qp = q + int64_t(ss.rows[0]) * q_width;
    float* op = out + int64_t(ss.rows[0]) * o_width;
    if (!contiguous) {
      qg_.resize(size_t(n) * q_width);
      og_.resize(size_t(n) * o_width);
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(&qg_[j * q_width], q + int64_t(ss.rows[j]) * q_width, q_width * sizeof(float));
      }
      // Rotated rows: Q turns the same way, so scores are unchanged (kv_rotation.h).
      if (in.rotation != 0) hadamard_rotate(qg_.data(), n * q_width, in.rotation);
      qp = qg_.data();
      op = og_.data();
    }
    kernels::AttentionParams p;
    p.n_tokens = n;
    p.n_head = hp_.n_head;
    p.n_head_kv = hp_.n_head_kv;
    p.head_dim = hp_.head_dim_k;
    p.scale = hp_.attn_scale;
    kernels::attention(p, qp, in.kv, in.mask, in.mask_stride, op, pool_);
    if (!contiguous) {
      if (in.rotation != 0) hadamard_rotate(og_.data(), n * o_width, in.rotation);
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(out + int64_t(ss.rows[j]) * o_width, &og_[j * o_width],
                    o_width * sizeof(float));
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
      std::memcpy(&normed[j * n_embd], &x_[size_t(out_idx[c0 + j]) * n_embd],
                  n_embd * sizeof(float));
    }
    kernels::rms_norm(normed.data(), model_.output_norm().f32(), hp_.rms_eps, n, n_embd,
                      normed.data());
    chunk_logits.resize(size_t(n) * n_vocab);
    if (head_rows_ == 0) {
      matmul(model_.output(), normed.data(), n, chunk_logits.data());
    } else {
      output_subset(normed.data(), n, chunk_logits.data());
    }
    if (hp_.logit_scale != 1.0f) {  // granitehybrid
      kernels::scale(chunk_logits.data(), n * n_vocab, 1.0f / hp_.logit_scale);
    }
    for (int64_t j = 0; j < n; ++j, ++k) {
      std::memcpy(out_rows[k], &chunk_logits[j * n_vocab], n_vocab * sizeof(float));
    }
  }
  return Status();
}

void Forward::set_output_subset(uint32_t n_head, std::span<const int32_t> extra) {
  const Weight& out = model_.output();
  const kernels::WeightMatrix w = matrix(out);
  head_ = kernels::PackedMatrix();
  extra_ = kernels::PackedMatrix();
  extra_ids_.clear();
  extra_src_.clear();
  if (n_head == 0 || n_head >= hp_.n_vocab) {
    head_rows_ = 0;
    return;
  }
  head_rows_ = n_head;
  // The whole matrix as run() multiplies it; the head viewed in it is a whole number of packed
  // row groups (a part of a group would be read from the source rows, with other rounding), the
  // rest of [0, n_head) joins the extra rows.
  const kernels::PackedMatrix source_only = kernels::adopt_packed(w, kernels::PackedImage{});
  const kernels::PackedMatrix& whole = out.packed != nullptr ? *out.packed : source_only;
  const uint32_t n_view = n_head / 16 * 16;
  head_ = kernels::packed_rows(whole, n_view);
  std::vector<uint8_t> seen(hp_.n_vocab - n_view, 0);
  auto add = [&](int32_t id) {
    if (seen[id - n_view]++ == 0) extra_ids_.push_back(id);
  };
  for (uint32_t id = n_view; id < n_head; ++id) add(int32_t(id));
  for (int32_t id : extra) {
    CHECK(id >= int32_t(n_head) && uint32_t(id) < hp_.n_vocab) << "output subset id " << id;
    add(id);
  }
  if (extra_ids_.empty()) return;
  extra_src_.resize(extra_ids_.size() * out.row_bytes);
  for (size_t j = 0; j < extra_ids_.size(); ++j) {
    std::memcpy(&extra_src_[j * out.row_bytes], out.row(extra_ids_[j]), out.row_bytes);
  }
  const kernels::WeightMatrix rows{w.type, extra_src_.data(), int64_t(extra_ids_.size()), w.n_in};
  extra_ = kernels::pack_like(whole, rows, pool_);
}

void Forward::output_subset(const float* x, int64_t n, float* y) {
  const int64_t n_vocab = hp_.n_vocab;
  std::fill(y, y + n * n_vocab, -INFINITY);
  if (head_.source().n_out > 0) kernels::matmul(head_, x, hp_.n_embd, n, y, n_vocab, pool_);
  const int64_t n_extra = int64_t(extra_ids_.size());
  if (n_extra == 0) return;
  extra_logits_.resize(size_t(n * n_extra));
  kernels::matmul(extra_, x, n, extra_logits_.data(), pool_);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < n_extra; ++j) {
      y[t * n_vocab + extra_ids_[j]] = extra_logits_[t * n_extra + j];
    }
  }
}

void Forward::apply_shifts(const MemoryContext& update) {
  if (hp_.rope_dim == 0) return;  // no RoPE (granitehybrid): K does not depend on pos
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    const KvCacheContext* kv = update.kv_for_layer(il);
    if (kv == nullptr) continue;
    kv->apply_k_shifts(il, rope_params(il), hp_.n_head_kv, hp_.head_dim_k, pool_);
  }
}

}  // namespace mnemo
