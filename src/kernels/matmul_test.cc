// matmul / get_rows against their scalar twins (reference.h), on every compiled SIMD target.
//
// Error bounds (per output element y[t][r], with w the dequantized weight row, x the token):
//   Integer paths quantize x to x^ = d * q per block b of 32 (d = amax_b / 127), so
//     |x_i - x^_i| <= d / 2 = amax_b / 254  and  |sum w (x - x^)| <= Q = sum_b amax_b / 254 *
//     sum_{i in b} |w_i|  (about 1/254 of the magnitude per block: the stated accuracy of
//     activation quantization to q8_0).
//   (a) Against the reference fed the same x^ (ref::matmul with quantize_x), only float rounding
//       remains: products of two scales and sums of up to n_in / 4 lane terms, ~1e-6 relative
//       to the magnitude M of the terms summed. M counts the weight offsets too (they are
//       applied separately and cancel: u * dw + cw), so M = sum_b (max_b |w| + range_b(w)) *
//       sum_{i in b} |x^_i|. Bound: 2e-5 * M.
//   (b) Against the exact float reference: Q + 2e-5 * M.
//   Float paths (F32 / F16 / BF16 weights, and every type on the scalar fallback): only float
//   rounding: 1e-5 * sum_i |w_i x_i|.
//   Thread counts, tile shapes and the other tokens of a call must not change a single bit (same
//   arithmetic per element: batch-invariant numerics, docs/numerics.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
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

constexpr GgmlType kAllTypes[] = {GgmlType::F32,    GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                  GgmlType::Q4_1,   GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                  GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

/// Random rows of `type`: quantized from N(0, 0.05) floats where quant can quantize, random
/// blocks with sane scales otherwise (K-quants).
std::vector<uint8_t> random_weights(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  const size_t rb = row_size(type, n_in);
  std::vector<uint8_t> data(rb * n_out);
  if (traits(type).can_quantize) {
    const std::vector<float> f = random_floats(rng, n_out * n_in, 0.05f);
    for (int64_t r = 0; r < n_out; ++r) {
      EXPECT_TRUE(quantize_row(type, f.data() + r * n_in, data.data() + r * rb, n_in).ok());
    }
    return data;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : data) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(1e-4f, 4e-3f);
  auto put = [&](size_t offset, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(data.data() + offset, &h, 2);
  };
  const size_t bs = type_size(type);
  for (size_t off = 0; off < data.size(); off += bs) {
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
      put(off + 0, scale(rng));  // d
      put(off + 2, scale(rng));  // dmin
    } else if (type == GgmlType::Q6_K) {
      put(off + 208, scale(rng) * 0.1f);  // d (int8 scales up to 127)
    } else {
      ADD_FAILURE() << "no random generator for " << type_name(type);
    }
  }
  return data;
}

struct Shape {
  int64_t n_out, n_in, n_tokens;
};

// Odd row counts (tile tails), n_in not a multiple of 64 (padding), more tokens than a cache
// block (64) and not a multiple of the tile width.
std::vector<Shape> shapes_for(GgmlType type) {
  // 17 and 20 tokens: on AMX CPUs one tile block plus a remainder of 1 and 4 tokens (dots on
  // the VNNI units); 70: a remainder of 6 (a partly used tile block). Decoding batches of 1 to 8
  // tokens take one VNNI tile of that width (3, 5 and 7 here). 389 x 4096 x 130: 25 row groups
  // in guided tasks of up to 7 groups (AMX: chunks of 4 widened groups) and two token blocks
  // of the AMX path (128 + 2 tokens: the activations of 4096-element rows in 512 KiB).
  if (block_size(type) == 256) {
    return {{13, 256, 1},  {6, 512, 2},   {37, 512, 3}, {70, 768, 70},
            {37, 512, 17}, {24, 256, 20}, {19, 256, 7}, {389, 4096, 130}};
  }
  return {{13, 64, 1}, {21, 128, 2},  {11, 192, 3}, {6, 64, 4},    {20, 64, 12}, {5, 96, 1},
          {37, 96, 3}, {70, 576, 70}, {9, 32, 5},   {21, 128, 17}, {20, 64, 20}, {19, 64, 7}};
}

void check_matmul(GgmlType type, const Shape& s, std::mt19937& rng) {
  SCOPED_TRACE(std::string(type_name(type)) + " n_out=" + std::to_string(s.n_out) +
               " n_in=" + std::to_string(s.n_in) + " n_tokens=" + std::to_string(s.n_tokens));
  const std::vector<uint8_t> wdata = random_weights(type, s.n_out, s.n_in, rng);
  const WeightMatrix w{type, wdata.data(), s.n_out, s.n_in};
  const std::vector<float> x = random_floats(rng, s.n_tokens * s.n_in, 1.0f, 37);

  // Dequantized weights and the quantized activations, for the bounds.
  std::vector<float> wf(s.n_out * s.n_in), xq(s.n_tokens * s.n_in);
  for (int64_t r = 0; r < s.n_out; ++r) {
    ASSERT_TRUE(dequantize_row(type, wdata.data() + r * row_size(type, s.n_in),
                               wf.data() + r * s.n_in, s.n_in)
                    .ok());
  }
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    ref::quantize_dequantize_q8(x.data() + t * s.n_in, s.n_in, xq.data() + t * s.n_in);
  }
  std::vector<float> y_exact(s.n_tokens * s.n_out), y_q(s.n_tokens * s.n_out);
  ref::matmul(w, x.data(), s.n_tokens, y_exact.data(), false);
  ref::matmul(w, x.data(), s.n_tokens, y_q.data(), true);

  ThreadPool pool2(2);
  ThreadPool pool3(3);
  for_each_target([&] {
    const bool int_path = internal::int_dot_active() && !is_float_type(type);
    std::vector<float> y(s.n_tokens * s.n_out, NAN);
    std::vector<double> rounding_bound(s.n_tokens * s.n_out);  // bound (a) / float bound
    matmul(w, x.data(), s.n_tokens, y.data(), nullptr);
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      for (int64_t r = 0; r < s.n_out; ++r) {
        const float* wr = wf.data() + r * s.n_in;
        const float* xt = x.data() + t * s.n_in;
        const float* xqt = xq.data() + t * s.n_in;
        const size_t o = t * s.n_out + r;
        if (!int_path) {
          double mag = 0.0;
          for (int64_t i = 0; i < s.n_in; ++i) mag += std::fabs(wr[i] * xt[i]);
          rounding_bound[o] = 1e-5 * mag + 1e-6;
          ASSERT_NEAR(y[o], y_exact[o], rounding_bound[o]) << "t=" << t << " r=" << r;
          continue;
        }
        double q_bound = 0.0, m = 0.0;
        for (int64_t b = 0; b < s.n_in; b += 32) {
          float amax = 0, wmax = 0, wmin = wr[b], wmaxv = wr[b];
          double wsum = 0, xsum = 0;
          for (int i = 0; i < 32; ++i) {
            amax = std::max(amax, std::fabs(xt[b + i]));
            wmax = std::max(wmax, std::fabs(wr[b + i]));
            wmin = std::min(wmin, wr[b + i]);
            wmaxv = std::max(wmaxv, wr[b + i]);
            wsum += std::fabs(wr[b + i]);
            xsum += std::fabs(xqt[b + i]);
          }
          q_bound += amax / 254.0 * wsum;
          m += (wmax + (wmaxv - wmin)) * xsum;
        }
        rounding_bound[o] = 2e-5 * m + 1e-6;
        ASSERT_NEAR(y[o], y_q[o], rounding_bound[o])
            << "vs quantized-x reference, t=" << t << " r=" << r;
        ASSERT_NEAR(y[o], y_exact[o], q_bound * 1.001 + 2e-5 * m + 1e-6)
            << "vs exact reference, t=" << t << " r=" << r;
      }
    }
    // Packed weights (packed for this target): the same bounds (the float arithmetic differs
    // from the unpacked path). On targets without packed kernels this exercises the fallback to
    // the source.
    const PackedMatrix packed = pack_matrix(w, &pool2);
    if (internal::packed_kernels_active() &&
        internal::packed_format_of(type) != internal::PackedFormat::kNone) {
      EXPECT_TRUE(packed.is_packed());
      // The size of the GGUF rows (legacy types keep their fp16 scales) plus the padding of the
      // last row group; K-quants keep a byte per 6-bit scale and min: under 3% more.
      const double growth = block_size(type) == 256 ? 1.03 : 1.0;
      const int64_t n_groups = (s.n_out + 15) / 16;
      EXPECT_LE(packed.packed_bytes(),
                growth * row_size(type, s.n_in) * 16 * n_groups + 64 * n_groups)
          << type_name(type);  // + each group rounded up to 64 bytes
    }
    // Packed into the caller's memory (the model's arena): packed_size() bytes, the very bytes
    // pack_matrix makes, and the same results; dst untouched where nothing is packed.
    const size_t n_into = packed_size(w);
    EXPECT_EQ(n_into, packed.packed_bytes());
    {
      std::vector<uint8_t> arena(n_into + 128, 0xA5);
      uint8_t* dst = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64);
      const PackedMatrix into = pack_matrix_into(w, dst, &pool3);
      EXPECT_EQ(into.is_packed(), packed.is_packed());
      EXPECT_EQ(into.packed_bytes(), n_into);
      const PackedImage a = packed_image(packed), b = packed_image(into);
      if (packed.is_packed()) {
        EXPECT_EQ(b.data, dst);
        EXPECT_EQ(0, std::memcmp(a.data, b.data, n_into));
        std::vector<float> ya(s.n_tokens * s.n_out), yb(s.n_tokens * s.n_out);
        matmul(packed, x.data(), s.n_in, s.n_tokens, ya.data(), s.n_out, &pool2);
        matmul(into, x.data(), s.n_in, s.n_tokens, yb.data(), s.n_out, &pool2);
        EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)));
      }
      for (size_t i = size_t(dst - arena.data()) + n_into; i < arena.size(); ++i) {
        ASSERT_EQ(arena[i], 0xA5) << "written past packed_size at " << i;
      }
    }
    // On AMX CPUs prompts take the tile path; the last pass covers the AVX-512 one instead.
    struct Run {
      ThreadPool* pool;
      bool no_amx;
    };
    for (const Run& run :
         {Run{nullptr, false}, Run{&pool2, false}, Run{&pool3, false}, Run{&pool2, true}}) {
      ThreadPool* pool = run.pool;
      const bool no_amx = run.no_amx;
      internal::set_amx_disabled_for_test(no_amx);
      std::vector<float> yp(s.n_tokens * s.n_out, NAN);
      matmul(packed, x.data(), s.n_in, s.n_tokens, yp.data(), s.n_out, pool);
      internal::set_amx_disabled_for_test(false);
      for (size_t o = 0; o < yp.size(); ++o) {
        const std::vector<float>& same_x = int_path ? y_q : y_exact;
        ASSERT_NEAR(yp[o], same_x[o], rounding_bound[o])
            << "packed, element " << o << (no_amx ? " (AMX off)" : "");
      }
      if (pool != nullptr || no_amx) continue;
      for (ThreadPool* other : {&pool2, &pool3}) {  // bit-identical for any thread count
        std::vector<float> yo(s.n_tokens * s.n_out, NAN);
        matmul(packed, x.data(), s.n_in, s.n_tokens, yo.data(), s.n_out, other);
        ASSERT_EQ(0, std::memcmp(yp.data(), yo.data(), yp.size() * sizeof(float)))
            << "packed, threads=" << other->n_threads();
      }
    }
    // Threads and tile shapes change which task computes an element, never its arithmetic.
    for (ThreadPool* pool : {&pool2, &pool3}) {
      std::vector<float> yp(s.n_tokens * s.n_out, NAN);
      matmul(w, x.data(), s.n_tokens, yp.data(), pool);
      ASSERT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * sizeof(float)))
          << "threads=" << pool->n_threads();
    }
    // Batch invariance: a token computed alone, or in a batch behind other tokens, gets the
    // same bits as in the full batch, packed or not (docs/numerics.md).
    std::vector<float> y1(s.n_out), yp_all(s.n_tokens * s.n_out);
    matmul(packed, x.data(), s.n_in, s.n_tokens, yp_all.data(), s.n_out, &pool2);
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      matmul(w, x.data() + t * s.n_in, 1, y1.data(), &pool2);
      ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * s.n_out, s.n_out * sizeof(float)))
          << "token " << t << " alone";
      matmul(packed, x.data() + t * s.n_in, s.n_in, 1, y1.data(), s.n_out, &pool3);
      ASSERT_EQ(0, std::memcmp(y1.data(), yp_all.data() + t * s.n_out, s.n_out * sizeof(float)))
          << "packed, token " << t << " alone";
    }
    if (s.n_tokens > 2) {  // the last tokens as a batch of their own (other tile positions)
      const int64_t t0 = 1, n = s.n_tokens - 1;
      std::vector<float> yt(n * s.n_out);
      matmul(w, x.data() + t0 * s.n_in, n, yt.data(), nullptr);
      ASSERT_EQ(0, std::memcmp(yt.data(), y.data() + t0 * s.n_out, yt.size() * sizeof(float)));
      matmul(packed, x.data() + t0 * s.n_in, s.n_in, n, yt.data(), s.n_out, &pool2);
      ASSERT_EQ(0, std::memcmp(yt.data(), yp_all.data() + t0 * s.n_out, yt.size() * sizeof(float)));
    }
  });
}

TEST(MatmulTest, MatchesReferenceOnEveryTarget) {
  std::mt19937 rng(1234);
  for (GgmlType type : kAllTypes) {
    for (const Shape& s : shapes_for(type)) check_matmul(type, s, rng);
  }
}

TEST(MatmulTest, StridedInputAndOutput) {
  std::mt19937 rng(7);
  const int64_t n_out = 24, n_in = 64, n_tokens = 5, xs = 80, ys = 30;
  const std::vector<uint8_t> wdata = random_weights(GgmlType::Q8_0, n_out, n_in, rng);
  const WeightMatrix w{GgmlType::Q8_0, wdata.data(), n_out, n_in};
  std::vector<float> x = random_floats(rng, n_tokens * xs);
  std::vector<float> xc(n_tokens * n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::copy(x.begin() + t * xs, x.begin() + t * xs + n_in, xc.begin() + t * n_in);
  }
  std::vector<float> y(n_tokens * ys, -7.0f), yc(n_tokens * n_out);
  matmul(w, x.data(), xs, n_tokens, y.data(), ys, nullptr);
  matmul(w, xc.data(), n_tokens, yc.data(), nullptr);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < ys; ++r) {
      if (r < n_out) {
        EXPECT_EQ(y[t * ys + r], yc[t * n_out + r]);
      } else {
        EXPECT_EQ(y[t * ys + r], -7.0f) << "wrote past n_out";
      }
    }
  }
}

// set_matmul_timing: nothing is added while it is off; on, each call adds its time once. On the
// targets without packed kernels a packed matrix is read through its source, a call inside the
// call: counted twice, the total would grow by about twice the call's wall time.
TEST(MatmulTest, TimingCountsEachCallOnceAndOnlyWhenOn) {
  std::mt19937 rng(11);
  const int64_t n_out = 256, n_in = 1024;
  const std::vector<uint8_t> wdata = random_weights(GgmlType::Q4_K, n_out, n_in, rng);
  const WeightMatrix w{GgmlType::Q4_K, wdata.data(), n_out, n_in};
  const PackedMatrix packed = pack_matrix(w, nullptr);
  const std::vector<float> x = random_floats(rng, n_in);
  std::vector<float> y(n_out);
  set_matmul_timing(false);
  const int64_t off0 = matmul_time_ns();
  matmul(packed, x.data(), 1, y.data(), nullptr);
  matmul(w, x.data(), 1, y.data(), nullptr);
  EXPECT_EQ(matmul_time_ns(), off0);
  set_matmul_timing(true);
  for_each_target([&] {
    for (int call = 0; call < 2; ++call) {
      const int64_t before = matmul_time_ns();
      const auto start = std::chrono::steady_clock::now();
      if (call == 0) {
        matmul(packed, x.data(), 1, y.data(), nullptr);
      } else {
        matmul(w, x.data(), 1, y.data(), nullptr);
      }
      const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - start)
                               .count();
      const int64_t added = matmul_time_ns() - before;
      EXPECT_GT(added, 0) << "call " << call;
      EXPECT_LE(added, wall) << "call " << call;
    }
  });
  set_matmul_timing(false);
}

TEST(GetRowsTest, EqualsDequantizeRow) {
  std::mt19937 rng(99);
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(type_name(type));
    const int64_t n_in = 256, n_out = 10;
    const std::vector<uint8_t> wdata = random_weights(type, n_out, n_in, rng);
    const WeightMatrix w{type, wdata.data(), n_out, n_in};
    const int32_t ids[] = {3, 0, 9, 3};
    std::vector<float> out(4 * n_in), want(n_in);
    get_rows(w, ids, 4, out.data());
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(
          dequantize_row(type, wdata.data() + ids[i] * row_size(type, n_in), want.data(), n_in)
              .ok());
      EXPECT_EQ(0, std::memcmp(want.data(), out.data() + i * n_in, n_in * sizeof(float)));
    }
  }
}

// packed_stack: parts packed one after another into one buffer read as one matrix give every row
// exactly what each part gives alone (the model's q | k | v and gate | up); parts that are not
// contiguous, of another type, or not whole row groups are refused (not packed).
TEST(MatmulTest, StackedPartsGiveEachPartsRows) {
  std::mt19937 rng(77);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_1}) {
    SCOPED_TRACE(type_name(type));
    const int64_t n_in = 512;
    const int64_t rows[3] = {48, 16, 32};
    std::vector<std::vector<uint8_t>> data;
    std::vector<WeightMatrix> ws;
    for (int64_t r : rows) {
      data.push_back(random_weights(type, r, n_in, rng));
      ws.push_back({type, data.back().data(), r, n_in});
    }
    const std::vector<float> x = random_floats(rng, 3 * n_in, 1.0f, 5);
    for_each_target([&] {
      size_t total = 0;
      for (const WeightMatrix& w : ws) total += packed_size(w);
      std::vector<uint8_t> buf(total + 64 + 64);
      uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64);
      std::vector<PackedMatrix> parts;
      size_t off = 0;
      for (const WeightMatrix& w : ws) {
        parts.push_back(pack_matrix_into(w, base + off, &pool));
        off += packed_size(w);
      }
      const PackedMatrix* ptrs[3] = {&parts[0], &parts[1], &parts[2]};
      const PackedMatrix stacked = packed_stack(ptrs);
      EXPECT_EQ(stacked.source().n_out, 96);
      if (!parts[0].is_packed()) {  // a target without packed layouts
        EXPECT_FALSE(stacked.is_packed());
        return;
      }
      ASSERT_TRUE(stacked.is_packed());
      EXPECT_TRUE(reads_packed(stacked));
      for (int64_t n_tokens : {1, 3}) {
        std::vector<float> y(n_tokens * 96, NAN), yp(n_tokens * 48, NAN);
        matmul(stacked, x.data(), n_tokens, y.data(), &pool);
        int64_t first = 0;
        for (int p = 0; p < 3; ++p) {
          yp.assign(size_t(n_tokens * rows[p]), NAN);
          matmul(parts[size_t(p)], x.data(), n_tokens, yp.data(), nullptr);
          for (int64_t t = 0; t < n_tokens; ++t) {
            ASSERT_EQ(0, std::memcmp(y.data() + t * 96 + first, yp.data() + t * rows[p],
                                     size_t(rows[p]) * sizeof(float)))
                << "part " << p << " token " << t << " of " << n_tokens;
          }
          first += rows[p];
        }
      }
      // Not one after another: refused.
      const PackedMatrix* gap[2] = {&parts[0], &parts[2]};
      EXPECT_FALSE(packed_stack(gap).is_packed());
      // A part that is not whole row groups before the end: refused.
      const WeightMatrix odd{type, data[0].data(), 36, n_in};
      std::vector<uint8_t> buf2(packed_size(odd) + packed_size(ws[1]) + 128);
      uint8_t* b2 = buf2.data() + (64 - reinterpret_cast<uintptr_t>(buf2.data()) % 64);
      const PackedMatrix o0 = pack_matrix_into(odd, b2, &pool);
      const PackedMatrix o1 = pack_matrix_into(ws[1], b2 + packed_size(odd), &pool);
      const PackedMatrix* oddp[2] = {&o0, &o1};
      EXPECT_FALSE(packed_stack(oddp).is_packed());
    });
  }
  // Parts of two types, one after another: refused.
  const std::vector<uint8_t> a = random_weights(GgmlType::Q4_K, 16, 256, rng);
  const std::vector<uint8_t> b = random_weights(GgmlType::Q6_K, 16, 256, rng);
  const WeightMatrix wa{GgmlType::Q4_K, a.data(), 16, 256}, wb{GgmlType::Q6_K, b.data(), 16, 256};
  std::vector<uint8_t> buf(packed_size(wa) + packed_size(wb) + 128);
  uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64);
  const PackedMatrix pa = pack_matrix_into(wa, base, &pool);
  const PackedMatrix pb = pack_matrix_into(wb, base + packed_size(wa), &pool);
  const PackedMatrix* mixed[2] = {&pa, &pb};
  EXPECT_FALSE(packed_stack(mixed).is_packed());
}

TEST(MatmulTest, SupportsTheModelTypes) {
  for (GgmlType type : kAllTypes) EXPECT_TRUE(matmul_supports(type)) << type_name(type);
  EXPECT_FALSE(matmul_supports(GgmlType::Q2_K));
  EXPECT_FALSE(matmul_supports(GgmlType::IQ2_XXS));
}

}  // namespace
}  // namespace mnemo::kernels
