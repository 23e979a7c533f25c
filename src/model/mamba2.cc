// The Mamba-2 block (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient
// Algorithms Through Structured State Space Duality"; Mamba: Gu & Dao 2023), as llama.cpp's
// mamba2 graph computes it from the GGUF tensors (src/model/model_ssm.cc lists them):
//
//   zxBCdt = W_in · n(x)                          [T x (d_inner | d_inner + 2 G N | H)]
//   xBC    = silu(conv1d(xBC; conv state) + b)    causal depthwise, width d_conv
//   x, B, C = split(xBC)                          [T x d_inner], [T x G N], [T x G N]
//   y      = ssm_scan(x, dt + dt_bias, A, B, C; ssm state) + D x     per head, scalar decay
//   y      = rms_norm_groups(y * silu(z)) * w_norm                   G groups
//   out    = W_out · y
//
// One ubatch holds one sequence (split_seq), so the mixer reads and writes that sequence's conv
// and ssm state in place through the memory context (RecurrentMemoryContext). State layouts (per
// layer, floats): conv [conv channels x (d_conv - 1)], oldest input first; ssm [H x head_dim x N]
// (mnemo/ssm_kernels.h). A mamba2 model is a stack of such blocks with a residual:
//   x += mixer(rms_norm(x) * w_attn_norm)
#include "kernels/ssm_kernels.h"
#include "memory/recurrent_memory.h"
#include "model/forward.h"

namespace mnemo {

void Forward::mamba2_mixer(uint32_t il, const RecurrentMemoryContext& rs, const float* in,
                           float* out) {
  const LayerWeights& L = model_.layers()[il];
  const int64_t T = n_tokens_;
  const int64_t H = hp_.ssm_n_head, G = hp_.ssm_n_group, N = hp_.ssm_d_state;
  const int64_t d_inner = hp_.ssm_d_inner, n_ch = hp_.ssm_conv_channels();
  const int64_t d_in_proj = 2 * d_inner + 2 * G * N + H;
  // Scratch: zxBCdt [T x d_in_proj] | xBC after the conv [T x n_ch] | y [T x d_inner].
  const size_t need = size_t(T) * size_t(d_in_proj + n_ch + d_inner);
  if (ssm_buf_.size() < need) ssm_buf_.resize(need);
  float* zxbcdt = ssm_buf_.data();
  float* xbc = zxbcdt + T * d_in_proj;
  float* y = xbc + T * n_ch;

  matmul(L.ssm_in, in, T, zxbcdt);  // `in` is not read after this: out may alias it
  const float* z = zxbcdt;
  const float* dt = zxbcdt + 2 * d_inner + 2 * G * N;

  kernels::SsmConvParams cp;
  cp.n_tokens = T;
  cp.n_ch = n_ch;
  cp.d_conv = hp_.ssm_d_conv;
  cp.silu = true;
  rs.for_segments(il, RsPart::kConv, T, [&](int64_t b, int64_t e) {
    cp.n_tokens = e - b;
    kernels::ssm_conv1d(cp, rs.conv_state(il), zxbcdt + b * d_in_proj + d_inner, d_in_proj,
                        L.ssm_conv1d.f32(), L.ssm_conv1d_b.present() ? L.ssm_conv1d_b.f32() : nullptr,
                        xbc + b * n_ch, n_ch, pool_);
  });

  kernels::SsmScanParams sp;
  sp.n_tokens = T;
  sp.n_head = H;
  sp.head_dim = d_inner / H;
  sp.d_state = N;
  sp.n_group = G;
  rs.for_segments(il, RsPart::kSsm, T, [&](int64_t b, int64_t e) {
    sp.n_tokens = e - b;
    const float* xb = xbc + b * n_ch;
    kernels::ssm_scan(sp, rs.ssm_state(il), xb, n_ch, dt + b * d_in_proj, d_in_proj,
                      L.ssm_dt_b.f32(), L.ssm_a.f32(), xb + d_inner, n_ch, xb + d_inner + G * N,
                      n_ch, L.ssm_d.f32(), y + b * d_inner, d_inner, pool_);
  });

  kernels::rms_norm_gated(y, d_inner, z, d_in_proj, L.ssm_norm.f32(), hp_.rms_eps, T, d_inner, G, y,
                          d_inner);
  matmul(L.ssm_out, y, T, out);
}

void Forward::ssm_block(uint32_t il, const MemoryContext& mctx, const Ubatch& ub) {
  if (hp_.arch != Arch::kMamba2) {  // granitehybrid, qwen35, qwen35moe
    hybrid_layer(il, mctx, ub);     // src/model/hybrid.cc
    return;
  }
  const RecurrentMemoryContext* rs = mctx.rs_for_layer(il);
  CHECK(rs != nullptr) << "no recurrent state for layer " << il;
  norm_rows(x_.data(), model_.layers()[il].attn_norm, h_.data());
  mamba2_mixer(il, *rs, h_.data(), h_.data());
  add_residual();
}

}  // namespace mnemo
