// Sub-blocks shared by the attention architectures (llama.cc, gemma3.cc, hybrid.cc): the
// attention sub-layer (projections, optional biases and QK-norm, RoPE, cache store, attention,
// output projection), the gated feed-forward and the mixture of experts. What differs per
// architecture (pre / post norms, residual scaling, the gate activation) stays in the
// architecture's file.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mnemo {

void Forward::attention_sublayer(uint32_t il, const KvCacheContext& kv, const Ubatch& ub,
                                 const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t hd = hp_.head_dim_k;
  const float eps = hp_.rms_eps;
  if (L.qkv_stack != nullptr && T <= kStackMaxTokens && kernels::reads_packed(*L.qkv_stack)) {
    // One call for q | k (| v), then each token's row split into q_, k_, v_ (the same bits as
    // three calls: every output row is computed alone).
    const int64_t nq = L.wq.ne1, nk = L.wk.ne1, nv = L.qkv_stack_has_v ? L.wv.ne1 : 0;
    const int64_t n = nq + nk + nv;
    if (stack_.size() < size_t(T * n)) stack_.resize(size_t(T * n));
    kernels::matmul(*L.qkv_stack, in, T, stack_.data(), pool_);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = stack_.data() + t * n;
      std::copy(row, row + nq, q_.data() + t * nq);
      std::copy(row + nq, row + nq + nk, k_.data() + t * nk);
      std::copy(row + nq + nk, row + n, v_.data() + t * nv);
    }
    if (!L.qkv_stack_has_v) matmul(L.wv, in, T, v_.data());
  } else {
    matmul(L.wq, in, T, q_.data());
    matmul(L.wk, in, T, k_.data());
    matmul(L.wv, in, T, v_.data());
  }
  add_bias(L.bq, q_.data(), T);
  add_bias(L.bk, k_.data(), T);
  add_bias(L.bv, v_.data(), T);
  if (L.attn_q_norm.present()) {
    kernels::rms_norm(q_.data(), L.attn_q_norm.f32(), eps, T * hp_.n_head, hd, q_.data());
    kernels::rms_norm(k_.data(), L.attn_k_norm.f32(), eps, T * hp_.n_head_kv, hd, k_.data());
  }
  if (hp_.rope_dim > 0) {
    const kernels::RopeParams rp = rope_params(il);
    const float* table = rope_table_for(il, ub);
    kernels::rope_apply(rp, table, T, hp_.n_head, hd, q_.data(), int64_t(hp_.n_head) * hd);
    kernels::rope_apply(rp, table, T, hp_.n_head_kv, hd, k_.data(), int64_t(hp_.n_head_kv) * hd);
  }
  attention(il, kv, ub, q_.data(), k_.data(), v_.data(), attn_.data());
  matmul(L.wo, attn_.data(), T, out);
  add_bias(L.bo, out, T);
}

void Forward::gated_ffn(uint32_t il, FfnAct act, const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const auto act_mul = [&](const float* gate, const float* up, int64_t n, float* y) {
    if (act == FfnAct::kSilu) {
      kernels::silu_mul(gate, up, n, y, pool_);
    } else {
      kernels::gelu_mul(gate, up, n, y, pool_);
    }
  };
  // The activation runs per token on the stacked rows: where n_ff is a multiple of every vector
  // length (16 floats), each element takes the same (vector) arithmetic as in one call over the
  // T * n_ff elements, whose scalar tail would otherwise fall elsewhere.
  const int64_t nf = L.ffn_gate.ne1;
  if (L.gate_up_stack != nullptr && T <= kStackMaxTokens && nf % 16 == 0 &&
      kernels::reads_packed(*L.gate_up_stack)) {
    // One call for gate | up; each token's row holds its gate, then its up.
    if (stack_.size() < size_t(T * 2 * nf)) stack_.resize(size_t(T * 2 * nf));
    kernels::matmul(*L.gate_up_stack, in, T, stack_.data(), pool_);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = stack_.data() + t * 2 * nf;
      act_mul(row, row + nf, nf, gate_.data() + t * nf);
    }
  } else {
    matmul(L.ffn_gate, in, T, gate_.data());
    matmul(L.ffn_up, in, T, up_.data());
    act_mul(gate_.data(), up_.data(), T * hp_.n_ff, gate_.data());
  }
  matmul(L.ffn_down, gate_.data(), T, out);
}

namespace {

// Rows [first, first + n) of a weight matrix, as a matrix of their own: the packed copy of
// that expert when the model repacked the experts (Weight::packed_slices).
Weight row_slice(const Weight& w, int64_t first, int64_t n) {
  Weight v;
  v.type = w.type;
  v.ne0 = w.ne0;
  v.row_bytes = w.row_bytes;
  v.data = w.data + size_t(first) * w.row_bytes;
  v.ne1 = n;
  if (!w.packed_slices.empty() && n == w.slice_rows && first % w.slice_rows == 0) {
    v.packed = w.packed_slices[size_t(first / w.slice_rows)];
  }
  return v;
}

}  // namespace

// Mixture of experts, as llama.cpp's build_moe_ffn with softmax gating (and, for qwen35moe, its
// gated shared expert) (Shazeer et al. 2017,
// "Outrageously Large Neural Networks"; Qwen3 technical report): per row, logits = Wr · in,
// p = softmax(logits) (sigmoid gating: p = sigmoid(logits)), the n_expert_used experts with
// the largest p (ties: the lower index), gate values g = p of those, divided by their sum when
// expert_weights_norm; out = sum_k g_k · Wdown_k · (silu(Wgate_k · in) * Wup_k · in).
// The rows routed to one expert are gathered and multiplied together, so an expert's weights
// are read once per ubatch whatever the number of its rows. Contributions are added in expert
// order, so a row's result does not depend on the other rows of the ubatch.
void Forward::moe_ffn(uint32_t il, const float* in, float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t E = hp_.n_expert, K = hp_.n_expert_used, F = hp_.n_ff_exp, D = hp_.n_embd;
  const int64_t R = T * K;  // (row, expert) pairs
  const int64_t Fs = hp_.n_ff_shexp;
  // Scratch: router [T x E] | result [T x D] | per pair: gathered row [D], gate [F], up [F],
  // expert output [D] | shared expert: gate [T x Fs], up [T x Fs], output [T x D], its gate [T].
  const size_t n_shared = Fs > 0 ? size_t(T * (2 * Fs + D + 1)) : 0;
  moe_buf_.resize(size_t(T * (E + D) + R * (2 * D + 2 * F)) + n_shared);
  float* router = moe_buf_.data();
  float* acc = router + T * E;
  float* xg = acc + T * D;  // [R x D]
  float* g = xg + R * D;    // [R x F]
  float* u = g + R * F;     // [R x F]
  float* y = u + R * F;     // [R x D]
  matmul(L.ffn_gate_inp, in, T, router);

  std::vector<int32_t> chosen(static_cast<size_t>(R));
  std::vector<float> weight(static_cast<size_t>(R));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    float* p = router + t * E;
    if (hp_.expert_gating == HParams::ExpertGating::kSoftmax) {
      float mx = p[0];
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, p[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(p[e] - mx));
      for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    }
    for (int64_t e = 0; e < E; ++e) order[size_t(e)] = int32_t(e);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      chosen[size_t(t * K + k)] = order[size_t(k)];
      sum += (weight[size_t(t * K + k)] = p[order[size_t(k)]]);
    }
    if (hp_.expert_weights_norm && sum > 0.0f) {
      for (int64_t k = 0; k < K; ++k) weight[size_t(t * K + k)] /= sum;
    }
  }

  // The pairs grouped by expert (expert order, then row order): one job per expert used.
  struct Job {
    int64_t expert, first, n;  // pairs [first, first + n) of the grouped lists
  };
  std::vector<Job> jobs;
  std::vector<int64_t> rows;
  std::vector<float> row_weight;
  rows.reserve(size_t(R));
  row_weight.reserve(size_t(R));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first = int64_t(rows.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        if (chosen[size_t(t * K + k)] == e) {
          rows.push_back(t);
          row_weight.push_back(weight[size_t(t * K + k)]);
        }
      }
    }
    if (int64_t(rows.size()) > first) jobs.push_back({e, first, int64_t(rows.size()) - first});
  }
  auto run_expert = [&](const Job& j, ThreadPool* pool) {
    float* jx = xg + j.first * D;
    float* jg = g + j.first * F;
    float* ju = u + j.first * F;
    float* jy = y + j.first * D;
    for (int64_t r = 0; r < j.n; ++r)
      std::copy_n(in + rows[size_t(j.first + r)] * D, D, jx + r * D);
    auto mm = [&](const Weight& w, const float* x, float* dst) {
      if (w.packed != nullptr) {
        kernels::matmul(*w.packed, x, j.n, dst, pool);
      } else {
        kernels::matmul(matrix(w), x, j.n, dst, pool);
      }
    };
    mm(row_slice(L.ffn_gate_exps, j.expert * F, F), jx, jg);
    mm(row_slice(L.ffn_up_exps, j.expert * F, F), jx, ju);
    kernels::silu_mul(jg, ju, j.n * F, jg, pool);
    mm(row_slice(L.ffn_down_exps, j.expert * D, D), jg, jy);
  };
  // When there are experts enough to share out (always in generation, and in prompts that
  // reach many experts), the threads take whole experts: one expert's multiplications are
  // small and splitting each costs a synchronization per call. Otherwise the experts run one
  // after another, each split over the threads. A row's result is the same either way
  // (matmul's outputs do not depend on the thread count).
  const int64_t n_threads = pool_ != nullptr ? pool_->n_threads() : 1;
  if (n_threads > 1 && jobs.size() > 1 && (T <= 4 || int64_t(jobs.size()) >= 4 * n_threads)) {
    pool_->parallel_for(int64_t(jobs.size()),
                        [&](int64_t jb, int) { run_expert(jobs[size_t(jb)], nullptr); });
  } else {
    for (const Job& j : jobs) run_expert(j, pool_);
  }
  std::fill(acc, acc + T * D, 0.0f);
  for (const Job& j : jobs) {
    for (int64_t r = 0; r < j.n; ++r) {
      float* dst = acc + rows[size_t(j.first + r)] * D;
      const float* src = y + (j.first + r) * D;
      const float w = row_weight[size_t(j.first + r)];
      for (int64_t c = 0; c < D; ++c) dst[c] += w * src[c];
    }
  }
  // The shared expert (qwen35moe): every row also runs one SwiGLU feed-forward, its output
  // scaled by sigmoid(ffn_gate_inp_shexp · in), added after the routed experts.
  if (Fs > 0) {
    float* sg = y + R * D;      // [T x Fs]
    float* su = sg + T * Fs;    // [T x Fs]
    float* sy = su + T * Fs;    // [T x D]
    float* sgate = sy + T * D;  // [T]
    matmul(L.ffn_gate_shexp, in, T, sg);
    matmul(L.ffn_up_shexp, in, T, su);
    matmul(L.ffn_gate_inp_shexp, in, T, sgate);
    kernels::silu_mul(sg, su, T * Fs, sg, pool_);
    matmul(L.ffn_down_shexp, sg, T, sy);
    for (int64_t t = 0; t < T; ++t) {
      const float gs = 1.0f / (1.0f + std::exp(-sgate[t]));
      for (int64_t c = 0; c < D; ++c) acc[t * D + c] += gs * sy[t * D + c];
    }
  }
  std::copy_n(acc, T * D, out);
}

}  // namespace mnemo
