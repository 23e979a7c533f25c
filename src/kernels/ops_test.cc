// The small ops (RMSNorm, softmax, gates, elementwise, soft-cap, RoPE) against their scalar twins
// (reference.h, double precision) on every compiled SIMD target.
//
// Error bounds, relative to the magnitude of the result:
//   - add / mul / scale: exact (one IEEE operation per element, same as the reference).
//   - rms_norm: a float sum of n squares (16-lane partial sums) and one rsqrt-free division:
//     1e-5 relative to |y| (sum error <= n/16 * 2^-24 relative, well under 1e-5 for n <= 4096).
//   - softmax, silu, gelu, soft-cap: Highway's Exp / Tanh are accurate to a few ulp (~1e-6
//     relative); with the float arithmetic around them: 1e-5 relative + 1e-7 absolute (results
//     near 0 carry the absolute error of their inputs).
//   - RoPE: the angles are the same double-precision values rounded to float once; the rotation
//     adds two float roundings: 2e-6 * (|x_i| + |x_partner|) per element.
//   - rope_shift on quantized rows: the re-rotated row is quantized again, so it may land one
//     quantization step (the block scale d) away from quantize(reference rotation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "mnemo/quant.h"
#include "mnemo/thread_pool.h"
#include "quant/blocks.h"
#include "support/kernels_test_util.h"

namespace mnemo::kernels {
namespace {

using testing::for_each_target;
using testing::random_floats;

constexpr int64_t kSizes[] = {1, 7, 16, 37, 64, 576, 1000};

TEST(OpsTest, RmsNorm) {
  std::mt19937 rng(1);
  for (int64_t n : kSizes) {
    const int64_t rows = 3;
    const std::vector<float> x = random_floats(rng, rows * n, 2.0f, 11);
    const std::vector<float> w = random_floats(rng, n);
    for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> want(rows * n);
      ref::rms_norm(x.data(), weight, 1e-6f, rows, n, want.data());
      for_each_target([&] {
        std::vector<float> y(rows * n);
        rms_norm(x.data(), weight, 1e-6f, rows, n, y.data());
        for (int64_t i = 0; i < rows * n; ++i) {
          ASSERT_NEAR(y[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7) << "n=" << n << " i=" << i;
        }
        std::vector<float> inplace = x;  // y may alias x
        rms_norm(inplace.data(), weight, 1e-6f, rows, n, inplace.data());
        ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)));
      });
    }
  }
}

TEST(OpsTest, Softmax) {
  std::mt19937 rng(2);
  for (int64_t n : kSizes) {
    const int64_t rows = 4;
    std::vector<float> x = random_floats(rng, rows * n, 5.0f);
    for (int64_t i = 0; i < n; i += 3) x[i] = -INFINITY;   // row 0: some masked
    for (int64_t i = 0; i < n; ++i) x[n + i] = -INFINITY;  // row 1: all masked
    x[2 * n] = 80.0f;                                      // row 2: large value
    std::vector<float> want = x;
    ref::softmax(want.data(), rows, n);
    for_each_target([&] {
      std::vector<float> y = x;
      softmax(y.data(), rows, n);
      for (int64_t i = 0; i < rows * n; ++i) {
        ASSERT_NEAR(y[i], want[i], 1e-5 * want[i] + 1e-7) << "n=" << n << " i=" << i;
      }
    });
  }
}

TEST(OpsTest, GatesAndActivations) {
  std::mt19937 rng(3);
  for (int64_t n : kSizes) {
    std::vector<float> g = random_floats(rng, n, 4.0f, 5);
    if (n >= 7) {  // extremes: saturation of exp / tanh
      g[0] = 100.0f;
      g[1] = -100.0f;
      g[2] = 1e4f;
      g[3] = -1e4f;
      g[4] = 0.0f;
    }
    const std::vector<float> u = random_floats(rng, n, 1.0f);
    std::vector<float> want_silu_mul(n), want_gelu_mul(n), want_silu(n), want_gelu(n);
    ref::silu_mul(g.data(), u.data(), n, want_silu_mul.data());
    ref::gelu_mul(g.data(), u.data(), n, want_gelu_mul.data());
    ref::silu(g.data(), n, want_silu.data());
    ref::gelu(g.data(), n, want_gelu.data());
    for_each_target([&] {
      std::vector<float> out(n);
      auto expect_near = [&](const std::vector<float>& want, const char* what) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(out[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7)
              << what << " n=" << n << " g=" << g[i];
        }
      };
      silu_mul(g.data(), u.data(), n, out.data());
      expect_near(want_silu_mul, "silu_mul");
      gelu_mul(g.data(), u.data(), n, out.data());
      expect_near(want_gelu_mul, "gelu_mul");
      silu(g.data(), n, out.data());
      expect_near(want_silu, "silu");
      gelu(g.data(), n, out.data());
      expect_near(want_gelu, "gelu");
      out = g;  // out may alias the input
      gelu_mul(out.data(), u.data(), n, out.data());
      expect_near(want_gelu_mul, "gelu_mul in place");
    });
  }
}

// With a pool the gates split long arrays over the threads: every element keeps the bits of the
// one-thread call (chunks are multiples of every vector length; the odd tail stays the array's).
TEST(OpsTest, GatesWithPoolMatchOneThread) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (int64_t n : {int64_t{100}, int64_t{40000}, int64_t{65536 + 13}}) {
    const std::vector<float> g = random_floats(rng, n, 4.0f, 5);
    const std::vector<float> u = random_floats(rng, n, 1.0f);
    for_each_target([&] {
      std::vector<float> one(n), split(n);
      silu_mul(g.data(), u.data(), n, one.data());
      silu_mul(g.data(), u.data(), n, split.data(), &pool);
      ASSERT_EQ(0, std::memcmp(one.data(), split.data(), n * sizeof(float))) << "silu_mul n=" << n;
      gelu_mul(g.data(), u.data(), n, one.data());
      split = g;  // in place, as the feed-forward calls it
      gelu_mul(split.data(), u.data(), n, split.data(), &pool);
      ASSERT_EQ(0, std::memcmp(one.data(), split.data(), n * sizeof(float))) << "gelu_mul n=" << n;
    });
  }
}

TEST(OpsTest, ElementwiseAreExact) {
  std::mt19937 rng(4);
  for (int64_t n : kSizes) {
    const std::vector<float> a = random_floats(rng, n), b = random_floats(rng, n);
    std::vector<float> want_add(n), want_mul(n), want_scale = a, want_cap = a;
    ref::add(a.data(), b.data(), n, want_add.data());
    ref::mul(a.data(), b.data(), n, want_mul.data());
    ref::scale(want_scale.data(), n, 0.37f);
    ref::softcap(want_cap.data(), n, 2.5f);
    for_each_target([&] {
      std::vector<float> out(n);
      add(a.data(), b.data(), n, out.data());
      ASSERT_EQ(out, want_add);
      mul(a.data(), b.data(), n, out.data());
      ASSERT_EQ(out, want_mul);
      out = a;
      scale(out.data(), n, 0.37f);
      ASSERT_EQ(out, want_scale);
      out = a;
      softcap(out.data(), n, 2.5f);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], want_cap[i], 1e-5 * 2.5);
    });
  }
}

void expect_rope_near(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<float>& in, const RopeParams& p, int64_t head_dim) {
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t j = static_cast<int64_t>(i % head_dim);
    int64_t partner = j;
    if (j < p.n_dims) {
      partner = p.mode == RopeMode::kNormal
                    ? (j ^ 1)
                    : (j < p.n_dims / 2 ? j + p.n_dims / 2 : j - p.n_dims / 2);
    }
    const double mag = std::fabs(in[i]) + std::fabs(in[i - j + partner]);
    ASSERT_NEAR(got[i], want[i], 2e-6 * mag + 1e-7) << "element " << i;
  }
}

TEST(RopeTest, MatchesReference) {
  std::mt19937 rng(5);
  const int32_t pos[] = {0, 1, 17, 2047, 100000};
  const int64_t n_tokens = 5;
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t head_dim : {64, 256, 40}) {
      for (int64_t n_dims : {head_dim, head_dim / 2}) {
        const RopeParams p{n_dims, mode, mode == RopeMode::kNormal ? 10000.0f : 1e6f, 0.25f};
        SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " head_dim "
                                          << head_dim << " n_dims " << n_dims);
        const int64_t n_head = 3;
        const std::vector<float> x = random_floats(rng, n_tokens * n_head * head_dim);
        std::vector<float> want = x;
        ref::rope(p, pos, n_tokens, n_head, head_dim, want.data());
        for_each_target([&] {
          std::vector<float> y = x;
          rope(p, pos, n_tokens, n_head, head_dim, y.data());
          expect_rope_near(y, want, x, p, head_dim);
          // Strided rows: the gap between token rows is left alone.
          const int64_t stride = n_head * head_dim + 5;
          std::vector<float> xs(n_tokens * stride, 42.0f);
          for (int64_t t = 0; t < n_tokens; ++t) {
            std::copy(x.begin() + t * n_head * head_dim, x.begin() + (t + 1) * n_head * head_dim,
                      xs.begin() + t * stride);
          }
          std::vector<float> table(n_tokens * rope_table_floats(p));
          rope_table(p, pos, n_tokens, table.data());
          rope_apply(p, table.data(), n_tokens, n_head, head_dim, xs.data(), stride);
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t i = 0; i < n_head * head_dim; ++i) {
              ASSERT_EQ(xs[t * stride + i], y[t * n_head * head_dim + i]);
            }
            for (int64_t i = n_head * head_dim; i < stride; ++i)
              ASSERT_EQ(xs[t * stride + i], 42.0f);
          }
        });
      }
    }
  }
}

TEST(RopeTest, ShiftComposesRotations) {
  // Rotating at p and then shifting by delta equals rotating at p + delta (f32 cache rows).
  std::mt19937 rng(6);
  const int64_t n_rows = 20, n_head_kv = 2, head_dim = 64, n = n_head_kv * head_dim;
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    const RopeParams p{head_dim, mode, 10000.0f, 1.0f};
    const std::vector<float> x = random_floats(rng, n_rows * n);
    std::vector<int32_t> pos(n_rows), delta(n_rows), moved(n_rows);
    for (int64_t r = 0; r < n_rows; ++r) {
      pos[r] = static_cast<int32_t>(r * 37);
      delta[r] = static_cast<int32_t>(r % 4 == 0 ? 0 : (r % 2 ? 300 : -5));
      moved[r] = pos[r] + delta[r];
    }
    std::vector<float> want = x;
    ref::rope(p, moved.data(), n_rows, n_head_kv, head_dim, want.data());
    ThreadPool pool(2);
    for_each_target([&] {
      std::vector<float> rows = x;
      rope(p, pos.data(), n_rows, n_head_kv, head_dim, rows.data());
      const std::vector<float> before = rows;
      rope_shift(p, GgmlType::F32, rows.data(), n * sizeof(float), n_rows, n_head_kv, head_dim,
                 delta.data(), &pool);
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = r * n + i;
          if (delta[r] == 0) {
            ASSERT_EQ(rows[k], before[k]) << "a zero delta must leave the row untouched";
          } else {
            ASSERT_NEAR(rows[k], want[k], 1e-5) << "row " << r << " element " << i;
          }
        }
      }
    });
  }
}

TEST(RopeTest, ShiftQuantizedRows) {
  std::mt19937 rng(7);
  const int64_t n_rows = 9, n_head_kv = 3, head_dim = 64, n = n_head_kv * head_dim;
  const RopeParams p{head_dim, RopeMode::kNeox, 1e6f, 1.0f};
  std::vector<int32_t> delta(n_rows);
  for (int64_t r = 0; r < n_rows; ++r) delta[r] = static_cast<int32_t>(r * 11 - 40);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16, GgmlType::IQ4_NL}) {
    SCOPED_TRACE(type_name(type));
    const size_t rb = row_size(type, n);
    std::vector<uint8_t> rows(n_rows * rb);
    const std::vector<float> x = random_floats(rng, n_rows * n);
    for (int64_t r = 0; r < n_rows; ++r) {
      ASSERT_TRUE(quantize_row(type, x.data() + r * n, rows.data() + r * rb, n).ok());
    }
    // Reference: dequantize, rotate by delta in double, quantize.
    std::vector<float> deq(n_rows * n), want(n_rows * n);
    for (int64_t r = 0; r < n_rows; ++r) {
      ASSERT_TRUE(dequantize_row(type, rows.data() + r * rb, deq.data() + r * n, n).ok());
      std::vector<float> v(deq.begin() + r * n, deq.begin() + (r + 1) * n);
      ref::rope(p, &delta[r], 1, n_head_kv, head_dim, v.data());
      std::vector<uint8_t> q(rb);
      ASSERT_TRUE(quantize_row(type, v.data(), q.data(), n).ok());
      ASSERT_TRUE(dequantize_row(type, q.data(), want.data() + r * n, n).ok());
    }
    for_each_target([&] {
      std::vector<uint8_t> got_rows = rows;
      rope_shift(p, type, got_rows.data(), rb, n_rows, n_head_kv, head_dim, delta.data(), nullptr);
      std::vector<float> got(n);
      for (int64_t r = 0; r < n_rows; ++r) {
        ASSERT_TRUE(dequantize_row(type, got_rows.data() + r * rb, got.data(), n).ok());
        for (int64_t b = 0; b < n; b += 32) {
          float amax = 0.0f;  // the quantization step: amax / 127 (q8_0), / 8 (q4_0), / 5.3 (iq4_nl
                              // widest gap)
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(want[r * n + b + i]));
          const float step = (type == GgmlType::Q8_0)  ? amax / 127.0f
                             : (type == GgmlType::F16) ? amax / 1024.0f
                                                       : amax / 5.0f;
          for (int i = 0; i < 32; ++i) {
            ASSERT_NEAR(got[b + i], want[r * n + b + i], 1.01f * step + 1e-6f)
                << "row " << r << " element " << b + i;
          }
        }
      }
    });
  }
}

}  // namespace
}  // namespace mnemo::kernels

namespace mnemo::kernels {
namespace {

TEST(QuantizeRowsTest, ByteIdenticalToQuantReference) {
  std::mt19937 rng(8);
  const int64_t n_rows = 5;
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                        GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::IQ4_NL}) {
    for (int64_t n : {32, 96, 576}) {
      SCOPED_TRACE(std::string(type_name(type)) + " n=" + std::to_string(n));
      const int64_t stride = n + 3;
      std::vector<float> x = testing::random_floats(rng, n_rows * stride, 1.0f, 13);
      // Edge cases in row 0: an all-zero block, a +a/-a tie for the signed maximum, and values
      // that land exactly on .5 after scaling (amax 127 -> d = 1).
      for (int i = 0; i < 32; ++i) x[i] = 0.0f;
      if (n >= 96) {
        for (int i = 32; i < 64; ++i) x[i] = (i % 7) * 0.25f;
        x[40] = 3.0f;
        x[41] = -3.0f;
        for (int i = 64; i < 96; ++i) x[i] = (i - 80) + 0.5f;
        x[95] = 127.0f;
      }
      const size_t rb = row_size(type, n);
      const size_t dst_stride = rb + 6;  // rows stay 2-byte aligned (fp16 scales)
      std::vector<uint8_t> want(n_rows * dst_stride, 0xAB);
      for (int64_t r = 0; r < n_rows; ++r) {
        ASSERT_TRUE(
            quantize_row(type, x.data() + r * stride, want.data() + r * dst_stride, n).ok());
      }
      ThreadPool pool(2);
      for_each_target([&] {
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<uint8_t> got(n_rows * dst_stride, 0xAB);
          quantize_rows(type, x.data(), stride, n_rows, n, got.data(), dst_stride, tp);
          ASSERT_EQ(got, want);
        }
      });
    }
  }
}

}  // namespace
}  // namespace mnemo::kernels
