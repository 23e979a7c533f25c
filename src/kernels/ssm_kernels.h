// CPU kernels of state-space (Mamba-style) layers: the short causal depthwise convolution with a
// carried state, the Mamba-2 selective scan (SSD recurrence with a scalar decay per head), the
// gated, grouped RMSNorm of Mamba-2's output, and the gated delta rule of Gated DeltaNet layers
// (Qwen3.5) with the L2 normalization of its queries and keys.
//
// Sources: Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces"
// (selective scan, causal conv1d front end); Dao & Gu 2024, "Transformers are SSMs: Generalized
// Models and Efficient Algorithms Through Structured State Space Duality" (Mamba-2: scalar A per
// head, B and C shared by the heads of a group, gated RMSNorm before the out-projection); Yang,
// Kautz & Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with Delta Rule" (the gated
// delta rule).
//
// SIMD through Highway (src/kernels/ssm.cc, delta_net.cc), dispatched per target; the results
// of a target do not depend on the thread count. Conventions as in mnemo/kernels.h: activations
// float32, matrices row-major ("[a x b]": a rows of b), strides in elements, a null ThreadPool runs
// on the calling thread, shapes are preconditions (CHECKed). Every kernel here has a scalar twin in
// src/kernels/ssm_reference.h (double accumulation) and ssm_test compares the two with stated
// bounds.
//
// State layouts (what the recurrent memory stores per sequence and layer, llama.cpp's order so
// the fastest-varying dimension comes first in its notation):
//   conv state  [n_ch x (d_conv - 1)]: per channel, its last d_conv - 1 inputs, oldest first.
//   ssm state   [n_head x head_dim x d_state]: h[head][i][s].
//   delta state [n_v_head x head_dim x head_dim]: S[head][i][j], i the value index, j the key
//               index (llama.cpp's gated delta net state, j fastest).
#pragma once

#include <cstdint>

namespace mnemo {

class ThreadPool;

namespace kernels {

/// One causal depthwise convolution call (Mamba's conv1d, kernel width d_conv, usually 4).
struct SsmConvParams {
  int64_t n_tokens = 0;  // T >= 1
  int64_t n_ch = 0;      // channels (Mamba-2: d_inner + 2 * n_group * d_state)
  int64_t d_conv = 0;    // kernel width, 1..64
  bool silu = true;      // apply SiLU to the output (Mamba does)
};

/// For each channel c and token t, with u the channel's inputs continued from the state
/// (u[0 .. d_conv-2] = conv_state[c], u[d_conv-1 + t] = x[t][c]):
///   y[t][c] = act(b[c] + sum_{k < d_conv} w[c][k] * u[t + k]),  act = SiLU or identity.
/// Tap d_conv - 1 multiplies the current token (torch.nn.Conv1d with left padding d_conv - 1).
///   conv_state: [n_ch x (d_conv - 1)], read, then replaced by the last d_conv - 1 inputs of u.
///   x: [T x n_ch], row stride x_stride; w: [n_ch x d_conv] (GGUF ssm_conv1d.weight rows);
///   b: [n_ch] or null; y: [T x n_ch], row stride y_stride; y must not overlap x or the state.
void ssm_conv1d(const SsmConvParams& p, float* conv_state, const float* x, int64_t x_stride,
                const float* w, const float* b, float* y, int64_t y_stride, ThreadPool* pool);

/// One Mamba-2 selective scan call.
struct SsmScanParams {
  int64_t n_tokens = 0;  // T >= 1
  int64_t n_head = 0;    // heads; n_head % n_group == 0
  int64_t head_dim = 0;  // channels per head (d_inner = n_head * head_dim)
  int64_t d_state = 0;   // state size N
  int64_t n_group = 0;   // groups sharing B and C; head h uses group h / (n_head / n_group)
};

/// The SSD recurrence, token by token, per head h (g its group), channel i and state index s:
///   dt'  = softplus(dt[t][h] + dt_bias[h])      softplus(v) = log(1 + e^v), v for v > 20
///   h_is = h_is * exp(dt' * A[h]) + dt' * x[t][h][i] * B[t][g][s]
///   y[t][h][i] = sum_s h_is * C[t][g][s]  (+ D[h] * x[t][h][i] when D is given)
///   state: [n_head x head_dim x d_state], updated in place (the state after the last token).
///   x: [T x n_head * head_dim] stride x_stride; dt: [T x n_head] stride dt_stride;
///   dt_bias: [n_head] or null; A: [n_head] (negative: -exp(A_log), as GGUF ssm_a stores it);
///   B, C: [T x n_group * d_state] strides b_stride / c_stride; D: [n_head] or null;
///   y: [T x n_head * head_dim] stride y_stride (must not overlap the inputs).
/// Threads split the heads.
void ssm_scan(const SsmScanParams& p, float* state, const float* x, int64_t x_stride,
              const float* dt, int64_t dt_stride, const float* dt_bias, const float* A,
              const float* B, int64_t b_stride, const float* C, int64_t c_stride, const float* D,
              float* y, int64_t y_stride, ThreadPool* pool);

/// Mamba-2's gated RMSNorm (gate first, then a norm per group of n / n_group channels):
///   v = y[t][j] * silu(z[t][j]);  out[t][j] = v / sqrt(mean over j's group of v^2 + eps) * w[j]
///   y, z, out: [T x n] with row strides y_stride, z_stride, out_stride; out may alias y.
///   w: [n] (GGUF ssm_norm.weight, [n / n_group, n_group]); n % n_group == 0.
void rms_norm_gated(const float* y, int64_t y_stride, const float* z, int64_t z_stride,
                    const float* w, float eps, int64_t n_tokens, int64_t n, int64_t n_group,
                    float* out, int64_t out_stride);

/// One gated delta rule call (Gated DeltaNet's recurrent core).
struct DeltaNetParams {
  int64_t n_tokens = 0;  // T >= 1
  int64_t n_k_head = 0;  // Hk: query / key heads
  int64_t n_v_head = 0;  // Hv: value heads, a multiple of Hk; value head h reads key head h % Hk
  int64_t head_dim = 0;  // d: the key and the value head dim (equal, as in Qwen3.5)
  float q_scale = 1.0f;  // multiplies q (1 / sqrt(d) in Gated DeltaNet)
};

/// The gated delta rule, token by token, per value head h with key head kh = h % Hk (the
/// tiling llama.cpp's graph applies when Hv > Hk):
///   S   = exp(g[t][h]) * S                      g <= 0: the decay, a log
///   u   = S k                                   k = k[t][kh], [d]
///   S  += beta[t][h] * (v[t][h] - u) k^T        v: [d]
///   o[t][h] = S (q_scale * q[t][kh])
/// q and k are used as given (Gated DeltaNet L2-normalizes them first: l2_norm_rows).
///   state: [Hv x d x d] (S[h][i][j], j fastest), updated in place to the state after token T-1.
///   q, k: [T x Hk * d] with row stride qk_stride; v: [T x Hv * d] row stride v_stride;
///   g, beta: [T x Hv] row stride gb_stride; out: [T x Hv * d] row stride out_stride (must not
///   overlap the inputs). Threads split the value heads. SIMD through Highway, per target.
void gated_delta_net(const DeltaNetParams& p, float* state, const float* q, const float* k,
                     int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                     const float* beta, int64_t gb_stride, float* out, int64_t out_stride,
                     ThreadPool* pool);

/// x[r][0 .. n) /= max(||x[r]||_2, eps) for each of n_rows rows with row stride `stride` (as
/// ggml_l2_norm). In place.
void l2_norm_rows(float* x, int64_t n_rows, int64_t n, int64_t stride, float eps);

}  // namespace kernels
}  // namespace mnemo
