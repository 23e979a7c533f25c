// State-space kernels (mnemo/ssm_kernels.h), under every SIMD target of this CPU, against their
// scalar twins (ssm_reference.h, double precision), plus properties neither twin can fake:
// splitting a token run across calls carries the state exactly, hand-computed values, and the head
// -> group mapping.
//
// Error bounds, relative to the magnitude of the result (inputs of magnitude ~1):
//   - ssm_conv1d: d_conv float products and sums per output, then SiLU: 1e-5 * (|y| + 1).
//   - ssm_scan: the float state picks up ~2 roundings per token while decays < 1 shrink older
//     errors; the dot product over d_state adds N roundings: 1e-4 * (max |y_ref| + 1) for the
//     runs here (T <= 40, N <= 64), with the state compared the same way.
//   - rms_norm_gated: a double sum of squares as in the twin, float products: 1e-5 * (|out| + 1).
//   - gated_delta_net: per token and state row two float dot products over d (<= 128) with
//     unit-norm q and k, and a state that decays (|S| stays ~|v|): 1e-4 * (max |ref| + 1) for
//     T <= 40, under every SIMD target of this CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/ssm_kernels.h"
#include "kernels/ssm_reference.h"
#include "mnemo/thread_pool.h"
#include "support/kernels_test_util.h"

namespace mnemo::kernels {
namespace {

std::vector<float> randn(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Splitting a run carries the state: from state s0, run(part, first, state, out, pool) over
// tokens [0, k) (no pool) then [k, T) (with pool), k = T / 3 + 1, T = p.n_tokens, with part = p
// cut to the tokens of each call and each token's output written at its place in out, must give
// exactly `out` and `state` of the one call.
template <class Params, class Run>
void expect_split_run_exact(const Params& p, const std::vector<float>& s0,
                            const std::vector<float>& out, const std::vector<float>& state,
                            ThreadPool* pool, const Run& run) {
  const int64_t T = p.n_tokens;
  if (T <= 1) return;
  const int64_t k = T / 3 + 1;
  std::vector<float> s2 = s0, out2(out.size());
  Params part = p;
  part.n_tokens = k;
  run(part, 0, s2.data(), out2.data(), nullptr);
  part.n_tokens = T - k;
  run(part, k, s2.data(), out2.data(), pool);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(s2, state);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

void Conv1dMatchesTwinAndCarriesState() {
  std::mt19937 rng(1);
  ThreadPool pool(3);
  for (int64_t K : {1, 2, 4}) {
    for (int64_t n_ch : {1, 5, 300, 600}) {
      for (int64_t T : {1, 3, 17}) {
        SsmConvParams p{T, n_ch, K, /*silu=*/K != 2};
        const int64_t xs = n_ch + 3;  // strided rows
        auto x = randn(rng, size_t(T * xs));
        auto w = randn(rng, size_t(n_ch * K), 0.5f);
        auto b = randn(rng, size_t(n_ch), 0.1f);
        auto st0 = randn(rng, size_t(n_ch * (K - 1)));
        std::vector<float> st = st0, st_ref = st0;
        std::vector<float> y(size_t(T * n_ch)), y_ref(y.size());
        ssm_conv1d(p, st.data(), x.data(), xs, w.data(), b.data(), y.data(), n_ch, &pool);
        ref::ssm_conv1d(p, st_ref.data(), x.data(), xs, w.data(), b.data(), y_ref.data(), n_ch);
        expect_close(y, y_ref, 1e-5f * (max_abs(y_ref) + 1), "y");
        EXPECT_EQ(st, st_ref);  // the new state is a copy of inputs: exact

        // Two calls over [0, k) and [k, T) equal one call over [0, T).
        if (T > 1) {
          const int64_t k = T / 2;
          std::vector<float> st2 = st0, y2(y.size());
          SsmConvParams a = p, c = p;
          a.n_tokens = k;
          c.n_tokens = T - k;
          ssm_conv1d(a, st2.data(), x.data(), xs, w.data(), b.data(), y2.data(), n_ch, nullptr);
          ssm_conv1d(c, st2.data(), x.data() + k * xs, xs, w.data(), b.data(), y2.data() + k * n_ch,
                     n_ch, nullptr);
          EXPECT_EQ(y2, y);
          EXPECT_EQ(st2, st);
        }
      }
    }
  }
  // By hand: d_conv 3, one channel, state [1, 2], input 3: 0.5 * 1 + 0.25 * 2 + 1 * 3 + bias 1.
  SsmConvParams p{1, 1, 3, false};
  float st[2] = {1, 2}, x = 3, w[3] = {0.5f, 0.25f, 1.0f}, b = 1, y = 0;
  ssm_conv1d(p, st, &x, 1, w, &b, &y, 1, nullptr);
  EXPECT_FLOAT_EQ(y, 5.0f);
  EXPECT_EQ(st[0], 2.0f);
  EXPECT_EQ(st[1], 3.0f);
}
TEST(SsmKernelsTest, Conv1dMatchesTwinAndCarriesStateOnEveryTarget) {
  testing::for_each_target(Conv1dMatchesTwinAndCarriesState);
}

struct ScanCase {
  int64_t T, H, P, N, G;
};

void ScanMatchesTwinAndCarriesState() {
  std::mt19937 rng(2);
  ThreadPool pool(4);
  for (const ScanCase& c :
       {ScanCase{1, 1, 1, 1, 1}, ScanCase{5, 4, 8, 16, 1}, ScanCase{40, 8, 16, 64, 2},
        ScanCase{7, 6, 4, 9, 3}, ScanCase{19, 4, 32, 32, 4}}) {
    SsmScanParams p{c.T, c.H, c.P, c.N, c.G};
    const int64_t d_inner = c.H * c.P, bc = c.G * c.N;
    // Strided like the model's in-projection output: one row holds x, B, C and dt.
    const int64_t row = d_inner + 2 * bc + c.H + 5;
    auto zx = randn(rng, size_t(c.T * row));
    const float* x = zx.data();
    const float* B = zx.data() + d_inner;
    const float* C = B + bc;
    const float* dt = C + bc;
    auto dt_bias = randn(rng, size_t(c.H), 0.5f);
    auto A = randn(rng, size_t(c.H));
    for (auto& a : A) a = -std::exp(a);  // as the converter stores it: -exp(A_log)
    auto D = randn(rng, size_t(c.H));
    auto s0 = randn(rng, size_t(d_inner * c.N), 0.3f);
    std::vector<float> s = s0, s_ref = s0;
    std::vector<float> y(size_t(c.T * d_inner)), y_ref(y.size());
    ssm_scan(p, s.data(), x, row, dt, row, dt_bias.data(), A.data(), B, row, C, row, D.data(),
             y.data(), d_inner, &pool);
    ref::ssm_scan(p, s_ref.data(), x, row, dt, row, dt_bias.data(), A.data(), B, row, C, row,
                  D.data(), y_ref.data(), d_inner);
    expect_close(y, y_ref, 1e-4f * (max_abs(y_ref) + 1), "y");
    expect_close(s, s_ref, 1e-4f * (max_abs(s_ref) + 1), "state");

    // Splitting the run carries the state: bit-identical to one call.
    expect_split_run_exact(
        p, s0, y, s, &pool,
        [&](const SsmScanParams& part, int64_t t0, float* st, float* out, ThreadPool* tp) {
          ssm_scan(part, st, x + t0 * row, row, dt + t0 * row, row, dt_bias.data(), A.data(),
                   B + t0 * row, row, C + t0 * row, row, D.data(), out + t0 * d_inner, d_inner, tp);
        });
  }
}
TEST(SsmKernelsTest, ScanMatchesTwinAndCarriesStateOnEveryTarget) {
  testing::for_each_target(ScanMatchesTwinAndCarriesState);
}

void ScanByHandAndGroupMapping() {
  // One head, one channel, one state: h = h * exp(dt' A) + dt' x B; y = h C + D x.
  SsmScanParams p{2, 1, 1, 1, 1};
  float state = 2.0f;
  const float x[2] = {1.0f, -1.0f}, dt[2] = {0.0f, 30.0f}, A = -0.5f, B[2] = {3, 1}, C[2] = {2, 1},
              D = 0.25f;
  float y[2];
  ssm_scan(p, &state, x, 1, dt, 1, nullptr, &A, B, 1, C, 1, &D, y, 1, nullptr);
  const double d0 = std::log(2.0);  // softplus(0)
  const double h0 = 2.0 * std::exp(d0 * -0.5) + d0 * 1 * 3;
  EXPECT_NEAR(y[0], h0 * 2 + 0.25, 1e-5);
  const double h1 = h0 * std::exp(30.0 * -0.5) + 30.0 * -1 * 1;  // softplus(30) = 30
  EXPECT_NEAR(y[1], h1 * 1 - 0.25, 1e-4);
  EXPECT_NEAR(state, h1, 1e-4);

  // 4 heads in 2 groups: heads 2, 3 read group 1, whose B and C are zero, so their output is
  // D * x alone and their state only decays.
  SsmScanParams q{1, 4, 2, 3, 2};
  std::vector<float> xs(8, 1.0f), dts(4, 0.0f), As(4, -1.0f), Ds(4, 0.5f), bs(6, 0.0f), cs(6, 0.0f),
      st(4 * 2 * 3, 1.0f), ys(8);
  for (int k = 0; k < 3; ++k) bs[k] = cs[k] = 1.0f;
  ssm_scan(q, st.data(), xs.data(), 8, dts.data(), 4, nullptr, As.data(), bs.data(), 6, cs.data(),
           6, Ds.data(), ys.data(), 8, nullptr);
  const float decay = std::exp(-std::log(2.0f));
  for (int i = 4; i < 8; ++i) EXPECT_FLOAT_EQ(ys[i], 0.5f);
  for (int i = 12; i < 24; ++i) EXPECT_FLOAT_EQ(st[i], decay);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(ys[i], 3 * (decay + std::log(2.0f)) + 0.5f, 1e-5);
}
TEST(SsmKernelsTest, ScanByHandAndGroupMappingOnEveryTarget) {
  testing::for_each_target(ScanByHandAndGroupMapping);
}

TEST(SsmKernelsTest, RmsNormGated) {
  std::mt19937 rng(3);
  for (int64_t n_group : {1, 2, 8}) {
    const int64_t n = 64 * n_group / (n_group > 2 ? 2 : 1), T = 3;
    auto y = randn(rng, size_t(T * n)), z = randn(rng, size_t(T * n)), w = randn(rng, size_t(n));
    std::vector<float> out(y.size()), out_ref(y.size());
    rms_norm_gated(y.data(), n, z.data(), n, w.data(), 1e-5f, T, n, n_group, out.data(), n);
    ref::rms_norm_gated(y.data(), n, z.data(), n, w.data(), 1e-5f, T, n, n_group, out_ref.data(),
                        n);
    expect_close(out, out_ref, 1e-5f * (max_abs(out_ref) + 1), "out");
    // In place.
    std::vector<float> yy = y;
    rms_norm_gated(yy.data(), n, z.data(), n, w.data(), 1e-5f, T, n, n_group, yy.data(), n);
    EXPECT_EQ(yy, out);
  }
  // By hand: one group of 2, z large (silu(z) ~ z): v = (3 * 10, 4 * 10); rms = sqrt(1250).
  const float y[2] = {3, 4}, z[2] = {10, 10}, w[2] = {1, 2};
  float out[2];
  rms_norm_gated(y, 2, z, 2, w, 0.0f, 1, 2, 1, out, 2);
  const double s = 10.0 / (1.0 + std::exp(-10.0));
  const double r = std::sqrt((9 * s * s + 16 * s * s) / 2);
  EXPECT_NEAR(out[0], 3 * s / r, 1e-5);
  EXPECT_NEAR(out[1], 2 * 4 * s / r, 1e-5);
}

struct DeltaCase {
  int64_t T, Hk, Hv, d;
};

TEST(SsmKernelsTest, DeltaNetMatchesTwinOnEveryTarget) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (const DeltaCase& c : {DeltaCase{1, 1, 1, 1}, DeltaCase{9, 2, 4, 16},
                             DeltaCase{40, 2, 2, 128}, DeltaCase{5, 1, 3, 13}}) {
    DeltaNetParams p{c.T, c.Hk, c.Hv, c.d, 1.0f / std::sqrt(float(c.d))};
    // Strided as the model's conv output: one row holds q, k and v.
    const int64_t row = 2 * c.Hk * c.d + c.Hv * c.d + 3;
    auto qkv = randn(rng, size_t(c.T * row));
    for (int64_t t = 0; t < c.T; ++t) {
      ref::l2_norm_rows(qkv.data() + t * row, 2 * c.Hk, c.d, c.d, 1e-6f);
    }
    const float* q = qkv.data();
    const float* k = q + c.Hk * c.d;
    const float* v = k + c.Hk * c.d;
    std::vector<float> g(size_t(c.T * c.Hv)), beta(g.size());
    std::uniform_real_distribution<float> ug(-2.0f, 0.0f), ub(0.0f, 1.0f);
    for (auto& x : g) x = ug(rng);
    for (auto& x : beta) x = ub(rng);
    const auto s0 = randn(rng, size_t(c.Hv * c.d * c.d), 0.3f);
    std::vector<float> s_ref = s0, o_ref(size_t(c.T * c.Hv * c.d));
    ref::gated_delta_net(p, s_ref.data(), q, k, row, v, row, g.data(), beta.data(), c.Hv,
                         o_ref.data(), c.Hv * c.d);
    testing::for_each_target([&] {
      std::vector<float> s = s0, o(o_ref.size());
      gated_delta_net(p, s.data(), q, k, row, v, row, g.data(), beta.data(), c.Hv, o.data(),
                      c.Hv * c.d, &pool);
      expect_close(o, o_ref, 1e-4f * (max_abs(o_ref) + 1), "out");
      expect_close(s, s_ref, 1e-4f * (max_abs(s_ref) + 1), "state");
      // Splitting the run carries the state: bit-identical to one call.
      expect_split_run_exact(
          p, s0, o, s, &pool,
          [&](const DeltaNetParams& part, int64_t t0, float* st, float* out, ThreadPool* tp) {
            gated_delta_net(part, st, q + t0 * row, k + t0 * row, row, v + t0 * row, row,
                            g.data() + t0 * c.Hv, beta.data() + t0 * c.Hv, c.Hv,
                            out + t0 * c.Hv * c.d, c.Hv * c.d, tp);
          });
    });
  }
}

// d = 2, one head, one token, by hand: S = e^g S0 = [[1, 0], [0, 2]] * 0.5, k = (1, 0),
// q = (0, 1), v = (3, 4), beta = 0.5: u = S k = (0.5, 0); S += 0.5 (v - u) k^T adds
// (1.25, 2) to column 0; o = S q = (0, 1), times q_scale 2.
TEST(SsmKernelsTest, DeltaNetByHand) {
  DeltaNetParams p{1, 1, 1, 2, 2.0f};
  std::vector<float> s = {1, 0, 0, 2};
  const float q[2] = {0, 1}, k[2] = {1, 0}, v[2] = {3, 4};
  const float g = std::log(0.5f), beta = 0.5f;
  float o[2];
  testing::for_each_target([&] {
    std::vector<float> st = s;
    gated_delta_net(p, st.data(), q, k, 2, v, 2, &g, &beta, 1, o, 2, nullptr);
    EXPECT_NEAR(st[0], 1.75f, 1e-6f);
    EXPECT_NEAR(st[1], 0.0f, 1e-6f);
    EXPECT_NEAR(st[2], 2.0f, 1e-6f);
    EXPECT_NEAR(st[3], 1.0f, 1e-6f);
    EXPECT_NEAR(o[0], 0.0f, 1e-6f);
    EXPECT_NEAR(o[1], 2.0f, 1e-6f);
  });
}

TEST(SsmKernelsTest, L2NormRows) {
  std::mt19937 rng(6);
  auto x = randn(rng, 3 * 40);
  auto want = x;
  ref::l2_norm_rows(want.data(), 3, 37, 40, 1e-6f);
  testing::for_each_target([&] {
    auto got = x;
    l2_norm_rows(got.data(), 3, 37, 40, 1e-6f);
    expect_close(got, want, 1e-6f, "l2");
  });
  std::vector<float> zero(8, 0.0f);
  l2_norm_rows(zero.data(), 1, 8, 8, 1e-6f);  // the eps floor: no division by zero
  for (float z : zero) EXPECT_EQ(z, 0.0f);
}

}  // namespace
}  // namespace mnemo::kernels
