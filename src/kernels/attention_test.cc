// attention() against its scalar twin (reference.h: dequantized K/V, two-pass softmax in double)
// on every compiled SIMD target, for every cache type pair the memory can hold.
//
// Error bound. If every score s_c of a row is off by at most delta, each softmax weight changes
// by a factor in [e^-2delta, e^2delta], so the output moves by at most
//   (e^(2 delta) - 1) * max_c |v_c|.
// Sources of delta (per row, over its visible cells c):
//   - float rounding of the dot products: 2e-5 * scale * max_c sum_i |q_i k_ci|;
//   - for quantized K on integer targets, Q is quantized to 8 bits per 32 (the kernel's
//     activation quantization): |q - q^| <= amax_b(q) / 254, so
//     delta_q = scale * max_c sum_b amax_b(q) / 254 * sum_{i in b} |k_ci|.
// The kernel is checked twice: against the reference fed the same quantized Q (bound from the
// rounding term only) and against the exact reference (both terms). V dequantized by the kernel
// may differ from quant's by an ulp: 1e-5 * max|v| more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "mnemo/quant.h"
#include "mnemo/thread_pool.h"
#include "support/kernels_test_util.h"

namespace mnemo::kernels {
namespace {

using testing::for_each_target;
using testing::random_floats;

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

struct Case {
  GgmlType k_type, v_type;
  int64_t n_tokens, n_head, n_head_kv, head_dim, n_kv;
  float softcap;
};

/// Rows of `type` quantized from N(0, 1) floats; `deq` gets their dequantized values.
std::vector<uint8_t> make_rows(GgmlType type, int64_t n_rows, int64_t n, std::mt19937& rng,
                               std::vector<float>& deq) {
  const size_t rb = row_size(type, n);
  std::vector<uint8_t> rows(n_rows * rb);
  const std::vector<float> f = random_floats(rng, n_rows * n, 1.0f, 29);
  deq.resize(n_rows * n);
  for (int64_t r = 0; r < n_rows; ++r) {
    EXPECT_TRUE(quantize_row(type, f.data() + r * n, rows.data() + r * rb, n).ok());
    EXPECT_TRUE(dequantize_row(type, rows.data() + r * rb, deq.data() + r * n, n).ok());
  }
  return rows;
}

void check_case(const Case& cs, std::mt19937& rng) {
  SCOPED_TRACE(std::string("K ") + std::string(type_name(cs.k_type)) + " V " +
               std::string(type_name(cs.v_type)) + " tokens " + std::to_string(cs.n_tokens) +
               " heads " + std::to_string(cs.n_head) + "/" + std::to_string(cs.n_head_kv) +
               " head_dim " + std::to_string(cs.head_dim) + " n_kv " + std::to_string(cs.n_kv));
  const int64_t n_kv_elems = cs.n_head_kv * cs.head_dim;
  std::vector<float> kd, vd;
  const std::vector<uint8_t> k = make_rows(cs.k_type, cs.n_kv, n_kv_elems, rng, kd);
  const std::vector<uint8_t> v = make_rows(cs.v_type, cs.n_kv, n_kv_elems, rng, vd);
  const KvView kv{cs.k_type, k.data(), row_size(cs.k_type, n_kv_elems),
                  cs.v_type, v.data(), row_size(cs.v_type, n_kv_elems),
                  cs.n_kv};
  const AttentionParams p{cs.n_tokens,
                          cs.n_head,
                          cs.n_head_kv,
                          cs.head_dim,
                          1.0f / std::sqrt(static_cast<float>(cs.head_dim)),
                          cs.softcap};
  const std::vector<float> q = random_floats(rng, cs.n_tokens * cs.n_head * cs.head_dim, 1.0f, 17);

  // Mask: causal over the last n_tokens cells, a few random holes, the last token sees nothing.
  const int64_t mask_stride = cs.n_kv + 3;
  std::vector<float> mask(cs.n_tokens * mask_stride, 0.0f);
  std::bernoulli_distribution hole(0.1);
  for (int64_t t = 0; t < cs.n_tokens; ++t) {
    for (int64_t c = 0; c < cs.n_kv; ++c) {
      const bool future = c > cs.n_kv - cs.n_tokens + t;
      const bool hidden = (cs.n_tokens > 1 && t == cs.n_tokens - 1) || hole(rng);
      if (future || hidden) mask[t * mask_stride + c] = -INFINITY;
    }
  }

  const size_t n_out = cs.n_tokens * cs.n_head * cs.head_dim;
  std::vector<float> want_exact(n_out), want_q(n_out);
  ref::attention(p, q.data(), kv, mask.data(), mask_stride, want_exact.data(), false);
  ref::attention(p, q.data(), kv, mask.data(), mask_stride, want_q.data(), true);

  // Per (token, head) bounds.
  const int64_t gqa = cs.n_head / cs.n_head_kv;
  std::vector<double> delta_f(cs.n_tokens * cs.n_head), delta_q(cs.n_tokens * cs.n_head);
  double vmax = 0.0;
  for (float x : vd) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
  for (int64_t t = 0; t < cs.n_tokens; ++t) {
    for (int64_t h = 0; h < cs.n_head; ++h) {
      const float* qv = q.data() + (t * cs.n_head + h) * cs.head_dim;
      double df = 0.0, dq = 0.0;
      for (int64_t c = 0; c < cs.n_kv; ++c) {
        if (mask[t * mask_stride + c] == -INFINITY) continue;
        const float* kc = kd.data() + c * n_kv_elems + (h / gqa) * cs.head_dim;
        double mag = 0.0, qerr = 0.0;
        for (int64_t b = 0; b < cs.head_dim; b += 32) {
          float amax = 0.0f;
          double ksum = 0.0;
          for (int i = 0; i < 32; ++i) {
            amax = std::max(amax, std::fabs(qv[b + i]));
            ksum += std::fabs(kc[b + i]);
            mag += std::fabs(qv[b + i] * kc[b + i]);
          }
          qerr += amax / 254.0 * ksum;
        }
        df = std::max(df, 2e-5 * p.scale * mag);
        dq = std::max(dq, p.scale * qerr);
      }
      delta_f[t * cs.n_head + h] = df;
      delta_q[t * cs.n_head + h] = dq;
    }
  }

  ThreadPool pool(2);
  ThreadPool pool3(3);
  for_each_target([&] {
    const bool quantized_q = internal::int_dot_active() && !is_float_type(cs.k_type);
    std::vector<float> first;
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool, &pool3}) {
      std::vector<float> out(n_out, NAN);
      attention(p, q.data(), kv, mask.data(), mask_stride, out.data(), tp);
      // The thread count never changes the result, not even in the last bit.
      if (first.empty()) {
        first = out;
      } else {
        ASSERT_EQ(0, std::memcmp(first.data(), out.data(), n_out * sizeof(float)))
            << "threads=" << (tp ? tp->n_threads() : 1);
      }
      for (int64_t t = 0; t < cs.n_tokens; ++t) {
        for (int64_t h = 0; h < cs.n_head; ++h) {
          const double df = delta_f[t * cs.n_head + h];
          const double dq = quantized_q ? delta_q[t * cs.n_head + h] : 0.0;
          const double tight = (std::expm1(2 * df) + 1e-5) * vmax + 1e-6;
          const double loose = (std::expm1(2 * (df + dq)) + 1e-5) * vmax + 1e-6;
          for (int64_t i = 0; i < cs.head_dim; ++i) {
            const size_t o = (t * cs.n_head + h) * cs.head_dim + i;
            const std::vector<float>& same_q = quantized_q ? want_q : want_exact;
            ASSERT_NEAR(out[o], same_q[o], tight)
                << "t=" << t << " h=" << h << " i=" << i << " threads=" << (tp ? 2 : 1);
            ASSERT_NEAR(out[o], want_exact[o], loose) << "vs exact, t=" << t << " h=" << h;
          }
        }
      }
    }
  });
}

TEST(AttentionTest, MatchesReferenceForEveryCacheType) {
  std::mt19937 rng(42);
  const std::vector<std::pair<GgmlType, GgmlType>> types = {
      {GgmlType::F32, GgmlType::F32},       {GgmlType::F16, GgmlType::F16},
      {GgmlType::BF16, GgmlType::BF16},     {GgmlType::Q8_0, GgmlType::Q8_0},
      {GgmlType::Q4_0, GgmlType::Q4_0},     {GgmlType::Q4_1, GgmlType::Q4_1},
      {GgmlType::Q5_0, GgmlType::Q5_0},     {GgmlType::Q5_1, GgmlType::Q5_1},
      {GgmlType::IQ4_NL, GgmlType::IQ4_NL}, {GgmlType::Q8_0, GgmlType::F16},
      {GgmlType::F16, GgmlType::Q4_0}};
  for (const auto& [kt, vt] : types) {
    // Decoding, SmolLM2 heads, enough cells to split the cell range across tasks.
    check_case({kt, vt, 1, 9, 3, 64, 700, 0.0f}, rng);
    // A prompt chunk, Gemma 3 heads (one K/V head, head_dim 256), causal mask.
    check_case({kt, vt, 20, 4, 1, 256, 90, 0.0f}, rng);
  }
}

TEST(AttentionTest, PaddedHeadDimSoftcapAndSmallCaches) {
  std::mt19937 rng(43);
  check_case({GgmlType::F16, GgmlType::F16, 3, 6, 2, 96, 40, 0.0f}, rng);
  check_case({GgmlType::Q8_0, GgmlType::Q8_0, 3, 6, 2, 96, 40, 0.0f}, rng);
  check_case({GgmlType::Q4_1, GgmlType::F32, 5, 8, 8, 32, 7, 0.0f}, rng);
  check_case({GgmlType::F32, GgmlType::F32, 2, 4, 2, 64, 130, 30.0f}, rng);
  check_case({GgmlType::Q8_0, GgmlType::Q8_0, 2, 4, 2, 64, 130, 30.0f}, rng);
}

TEST(AttentionTest, NoMaskAndEmptyCache) {
  std::mt19937 rng(44);
  const int64_t hd = 64, n_kv = 33;
  std::vector<float> kd, vd;
  const std::vector<uint8_t> k = make_rows(GgmlType::Q8_0, n_kv, hd, rng, kd);
  const std::vector<uint8_t> v = make_rows(GgmlType::Q8_0, n_kv, hd, rng, vd);
  const KvView kv{GgmlType::Q8_0,
                  k.data(),
                  row_size(GgmlType::Q8_0, hd),
                  GgmlType::Q8_0,
                  v.data(),
                  row_size(GgmlType::Q8_0, hd),
                  n_kv};
  const AttentionParams p{2, 2, 1, hd, 0.125f, 0.0f};
  const std::vector<float> q = random_floats(rng, 2 * 2 * hd);
  std::vector<float> out(2 * 2 * hd), want(2 * 2 * hd);
  attention(p, q.data(), kv, nullptr, 0, out.data(), nullptr);
  ref::attention(p, q.data(), kv, nullptr, 0, want.data(), internal::int_dot_active());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-3);
  KvView empty = kv;
  empty.n_kv = 0;
  attention(p, q.data(), empty, nullptr, 0, out.data(), nullptr);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// Batch-invariant numerics (docs/numerics.md): a query row's output is the same bits whatever
// else the call holds (other tokens, alone or in a batch, decode or prompt schedule), the
// thread count, and where its cells lie in the cache, as long as the visiting order lists them
// in the same sequence. Other sequences' cells (masked) interleaved in the cache, or the cells
// stored in another order with `order` listing them as before, change nothing.
TEST(AttentionTest, RowsAreBatchInvariant) {
  std::mt19937 rng(45);
  const std::vector<std::pair<GgmlType, GgmlType>> types = {{GgmlType::F16, GgmlType::F16},
                                                            {GgmlType::Q8_0, GgmlType::Q8_0},
                                                            {GgmlType::Q4_0, GgmlType::Q5_1},
                                                            {GgmlType::F32, GgmlType::BF16},
                                                            {GgmlType::BF16, GgmlType::Q4_1}};
  const int64_t n_head = 6, n_head_kv = 2, hd = 64, n_kv = 300, n_tokens = 20;
  const int64_t n_elems = n_head_kv * hd;
  for (const auto& [kt, vt] : types) {
    SCOPED_TRACE(std::string("K ") + std::string(type_name(kt)) + " V " +
                 std::string(type_name(vt)));
    std::vector<float> kd, vd;
    const std::vector<uint8_t> k = make_rows(kt, n_kv, n_elems, rng, kd);
    const std::vector<uint8_t> v = make_rows(vt, n_kv, n_elems, rng, vd);
    const size_t kb = row_size(kt, n_elems), vb = row_size(vt, n_elems);
    const KvView kv{kt, k.data(), kb, vt, v.data(), vb, n_kv};
    const AttentionParams p{n_tokens, n_head, n_head_kv, hd, 0.125f, 0.0f};
    const std::vector<float> q = random_floats(rng, n_tokens * n_head * hd, 1.0f, 17);
    // Token t sees cells [0, n_kv - n_tokens + t] (causal), the first a few holes.
    std::vector<float> mask(n_tokens * n_kv, 0.0f);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t c = n_kv - n_tokens + t + 1; c < n_kv; ++c) mask[t * n_kv + c] = -INFINITY;
      if (t == 0) mask[5] = mask[17] = -INFINITY;
    }
    // The same cells interleaved with another sequence's (masked) cells, and in reverse order
    // with `order` listing them forwards.
    std::vector<float> kdummy, vdummy;
    const std::vector<uint8_t> k_other = make_rows(kt, n_kv, n_elems, rng, kdummy);
    const std::vector<uint8_t> v_other = make_rows(vt, n_kv, n_elems, rng, vdummy);
    std::vector<uint8_t> k2(2 * n_kv * kb), v2(2 * n_kv * vb), k3(n_kv * kb), v3(n_kv * vb);
    std::vector<float> mask2(n_tokens * 2 * n_kv, -INFINITY), mask3(n_tokens * n_kv);
    std::vector<int32_t> order2(2 * n_kv), order3(n_kv);
    for (int64_t c = 0; c < n_kv; ++c) {
      std::memcpy(&k2[(2 * c + 1) * kb], &k[c * kb], kb);
      std::memcpy(&v2[(2 * c + 1) * vb], &v[c * vb], vb);
      std::memcpy(&k2[2 * c * kb], &k_other[c * kb], kb);
      std::memcpy(&v2[2 * c * vb], &v_other[c * vb], vb);
      const int64_t r = n_kv - 1 - c;  // reversed storage
      std::memcpy(&k3[r * kb], &k[c * kb], kb);
      std::memcpy(&v3[r * vb], &v[c * vb], vb);
      order2[2 * c] = static_cast<int32_t>(2 * c);
      order2[2 * c + 1] = static_cast<int32_t>(2 * c + 1);
      order3[c] = static_cast<int32_t>(r);
      for (int64_t t = 0; t < n_tokens; ++t) {
        mask2[t * 2 * n_kv + 2 * c + 1] = mask[t * n_kv + c];
        mask3[t * n_kv + r] = mask[t * n_kv + c];
      }
    }
    KvView kv2{kt, k2.data(), kb, vt, v2.data(), vb, 2 * n_kv};
    kv2.order = order2.data();
    kv2.n_order = 2 * n_kv;
    KvView kv3{kt, k3.data(), kb, vt, v3.data(), vb, n_kv};
    kv3.order = order3.data();
    kv3.n_order = n_kv;

    ThreadPool pool2(2);
    ThreadPool pool3(3);
    const size_t row = n_head * hd;
    for_each_target([&] {
      std::vector<float> full(n_tokens * row, NAN);
      attention(p, q.data(), kv, mask.data(), n_kv, full.data(), &pool2);
      std::vector<float> got(n_tokens * row, NAN);
      attention(p, q.data(), kv2, mask2.data(), 2 * n_kv, got.data(), &pool3);
      ASSERT_EQ(0, std::memcmp(full.data(), got.data(), got.size() * sizeof(float)))
          << "interleaved with another sequence";
      attention(p, q.data(), kv3, mask3.data(), n_kv, got.data(), nullptr);
      ASSERT_EQ(0, std::memcmp(full.data(), got.data(), got.size() * sizeof(float)))
          << "stored in reverse, visited by order";
      // Each token alone (the decode schedule), and the last 3 tokens as a batch.
      AttentionParams one = p;
      one.n_tokens = 1;
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          std::vector<float> o(row, NAN);
          attention(one, q.data() + t * row, kv, mask.data() + t * n_kv, n_kv, o.data(), tp);
          ASSERT_EQ(0, std::memcmp(o.data(), full.data() + t * row, row * sizeof(float)))
              << "token " << t << " alone";
        }
      }
      AttentionParams three = p;
      three.n_tokens = 3;
      std::vector<float> o(3 * row, NAN);
      const int64_t t0 = n_tokens - 3;
      attention(three, q.data() + t0 * row, kv, mask.data() + t0 * n_kv, n_kv, o.data(), &pool2);
      ASSERT_EQ(0, std::memcmp(o.data(), full.data() + t0 * row, o.size() * sizeof(float)));
    });
  }
}

// The two schedules (whole (head, token chunk) tasks for prompts; scores, weights and V in
// separate phases for few tasks) give the same bits for a row: a prompt of 96 tokens (16 or
// more tasks) against each of its last tokens alone and a 17-token verify batch (few tasks).
// Shapes of Qwen2.5's 1.5B (6 heads per K/V head of 128) and 0.5B (7 per K/V head of 64).
TEST(AttentionTest, PromptAndDecodeSchedulesAgree) {
  std::mt19937 rng(46);
  struct Shape {
    int64_t n_head, n_head_kv, hd;
  };
  for (const Shape& sh : {Shape{12, 2, 128}, Shape{14, 2, 64}}) {
    for (const auto& [kt, vt] : std::vector<std::pair<GgmlType, GgmlType>>{
             {GgmlType::F16, GgmlType::F16}, {GgmlType::Q8_0, GgmlType::Q8_0}}) {
      SCOPED_TRACE(std::string("K ") + std::string(type_name(kt)) + " V " +
                   std::string(type_name(vt)) + " heads " + std::to_string(sh.n_head));
      const int64_t n_kv = 400, n_tokens = 96;
      const int64_t n_elems = sh.n_head_kv * sh.hd;
      std::vector<float> kd, vd;
      const std::vector<uint8_t> k = make_rows(kt, n_kv, n_elems, rng, kd);
      const std::vector<uint8_t> v = make_rows(vt, n_kv, n_elems, rng, vd);
      const KvView kv{kt,  k.data(), row_size(kt, n_elems), vt, v.data(), row_size(vt, n_elems),
                      n_kv};
      const AttentionParams p{n_tokens, sh.n_head, sh.n_head_kv, sh.hd, 0.1f, 0.0f};
      const std::vector<float> q = random_floats(rng, n_tokens * sh.n_head * sh.hd, 1.0f, 19);
      std::vector<float> mask(n_tokens * n_kv, 0.0f);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t c = n_kv - n_tokens + t + 1; c < n_kv; ++c) mask[t * n_kv + c] = -INFINITY;
      }
      ThreadPool pool2(2);
      const size_t row = sh.n_head * sh.hd;
      for_each_target([&] {
        std::vector<float> full(n_tokens * row, NAN);
        attention(p, q.data(), kv, mask.data(), n_kv, full.data(), &pool2);
        AttentionParams one = p;
        one.n_tokens = 1;
        for (int64_t t = n_tokens - 4; t < n_tokens; ++t) {
          std::vector<float> o(row, NAN);
          attention(one, q.data() + t * row, kv, mask.data() + t * n_kv, n_kv, o.data(), &pool2);
          ASSERT_EQ(0, std::memcmp(o.data(), full.data() + t * row, row * sizeof(float)))
              << "token " << t << " alone";
        }
        AttentionParams verify = p;
        verify.n_tokens = 17;
        const int64_t t0 = n_tokens - 17;
        std::vector<float> o(17 * row, NAN);
        attention(verify, q.data() + t0 * row, kv, mask.data() + t0 * n_kv, n_kv, o.data(), &pool2);
        ASSERT_EQ(0, std::memcmp(o.data(), full.data() + t0 * row, o.size() * sizeof(float)))
            << "17-token batch";
      });
    }
  }
}

// V stored per head (KvView::v_head_stride, the cache's V planes) gives the bits of V stored as
// rows, on every target and thread count, for both schedules (decoding with few tasks, a prompt
// chunk with many), every V type's read path, an order that skips cells and a mask with holes.
TEST(AttentionTest, VPlanesGiveTheBitsOfRows) {
  std::mt19937 rng(47);
  struct Shape {
    int64_t n_tokens, n_head, n_head_kv, hd, n_kv;
  };
  for (const Shape& sh :
       {Shape{1, 12, 2, 128, 600}, Shape{3, 9, 3, 64, 300}, Shape{40, 8, 2, 64, 200}}) {
    for (GgmlType vt : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                        GgmlType::Q4_0, GgmlType::IQ4_NL}) {
      const GgmlType kt = GgmlType::F16;
      SCOPED_TRACE(std::string("V ") + std::string(type_name(vt)) + " tokens " +
                   std::to_string(sh.n_tokens) + " heads " + std::to_string(sh.n_head));
      const int64_t n_elems = sh.n_head_kv * sh.hd;
      std::vector<float> kd, vd;
      const std::vector<uint8_t> k = make_rows(kt, sh.n_kv, n_elems, rng, kd);
      const std::vector<uint8_t> v = make_rows(vt, sh.n_kv, n_elems, rng, vd);
      // The planes: head g's segment of cell c at g * n_kv * seg + c * seg.
      const size_t row = row_size(vt, n_elems), seg = row_size(vt, sh.hd);
      std::vector<uint8_t> planes(v.size());
      for (int64_t g = 0; g < sh.n_head_kv; ++g) {
        for (int64_t c = 0; c < sh.n_kv; ++c) {
          std::memcpy(planes.data() + (g * sh.n_kv + c) * seg, v.data() + c * row + g * seg, seg);
        }
      }
      // Every third cell left out of the order.
      std::vector<int32_t> order;
      for (int32_t c = 0; c < sh.n_kv; ++c) {
        if (c % 3 != 1) order.push_back(c);
      }
      KvView rows_kv{kt, k.data(), row_size(kt, n_elems), vt, v.data(), row, sh.n_kv};
      rows_kv.order = order.data();
      rows_kv.n_order = static_cast<int64_t>(order.size());
      KvView planes_kv = rows_kv;
      planes_kv.v = planes.data();
      planes_kv.v_stride = seg;
      planes_kv.v_head_stride = sh.n_kv * seg;
      const AttentionParams p{sh.n_tokens, sh.n_head, sh.n_head_kv, sh.hd, 0.1f, 0.0f};
      const std::vector<float> q = random_floats(rng, sh.n_tokens * sh.n_head * sh.hd, 1.0f, 23);
      std::vector<float> mask(sh.n_tokens * sh.n_kv, 0.0f);
      std::bernoulli_distribution hole(0.1);
      for (float& m : mask) m = hole(rng) ? -INFINITY : 0.0f;
      const size_t n_out = sh.n_tokens * sh.n_head * sh.hd;
      std::vector<float> want_ref(n_out), got_ref(n_out);
      ref::attention(p, q.data(), rows_kv, mask.data(), sh.n_kv, want_ref.data(), false);
      ref::attention(p, q.data(), planes_kv, mask.data(), sh.n_kv, got_ref.data(), false);
      ASSERT_EQ(0, std::memcmp(want_ref.data(), got_ref.data(), n_out * sizeof(float)));
      ThreadPool pool(2);
      for_each_target([&] {
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> a(n_out, NAN), b(n_out, NAN);
          attention(p, q.data(), rows_kv, mask.data(), sh.n_kv, a.data(), tp);
          attention(p, q.data(), planes_kv, mask.data(), sh.n_kv, b.data(), tp);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n_out * sizeof(float)))
              << "threads=" << (tp ? 2 : 1);
        }
      });
    }
  }
}

}  // namespace
}  // namespace mnemo::kernels
