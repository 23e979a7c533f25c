// Tests of the quant module: the type table, row arithmetic, fp16 / bf16 converters against an
// independent rounding reference, hand-built blocks with known values, and per-type round-trip
// error bounds on random data. Bit-exactness against ggml / gguf-py lives in
// tests/python/test_quant.py.
#include "mnemo/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/blocks.h"

namespace mnemo {
namespace {

// ---- type table -----------------------------------------------------------------------------

struct ExpectedType {
  uint32_t id;
  const char* name;
  uint32_t block_size;
  uint32_t type_size;
  bool dq;
  bool q;
};

// From the GGUF spec / ggml-common.h (Q8_1 is 36 bytes in ggml; gguf-py's 40 is stale).
constexpr ExpectedType kExpected[] = {
    {0, "f32", 1, 4, true, true},           {1, "f16", 1, 2, true, true},
    {2, "q4_0", 32, 18, true, true},        {3, "q4_1", 32, 20, true, true},
    {6, "q5_0", 32, 22, true, true},        {7, "q5_1", 32, 24, true, true},
    {8, "q8_0", 32, 34, true, true},        {9, "q8_1", 32, 36, false, false},
    {10, "q2_K", 256, 84, true, false},     {11, "q3_K", 256, 110, true, false},
    {12, "q4_K", 256, 144, true, false},    {13, "q5_K", 256, 176, true, false},
    {14, "q6_K", 256, 210, true, false},    {15, "q8_K", 256, 292, true, true},
    {16, "iq2_xxs", 256, 66, false, false}, {17, "iq2_xs", 256, 74, false, false},
    {18, "iq3_xxs", 256, 98, false, false}, {19, "iq1_s", 256, 50, false, false},
    {20, "iq4_nl", 32, 18, true, true},     {21, "iq3_s", 256, 110, false, false},
    {22, "iq2_s", 256, 82, false, false},   {23, "iq4_xs", 256, 136, false, false},
    {24, "i8", 1, 1, false, false},         {25, "i16", 1, 2, false, false},
    {26, "i32", 1, 4, false, false},        {27, "i64", 1, 8, false, false},
    {28, "f64", 1, 8, false, false},        {29, "iq1_m", 256, 56, false, false},
    {30, "bf16", 1, 2, true, true},         {34, "tq1_0", 256, 54, false, false},
    {35, "tq2_0", 256, 66, false, false},   {39, "mxfp4", 32, 17, false, false},
    {40, "nvfp4", 64, 36, false, false},    {41, "q1_0", 128, 18, false, false},
};

TEST(TypeTraitsTest, TableMatchesSpec) {
  for (const ExpectedType& e : kExpected) {
    SCOPED_TRACE(e.name);
    const auto t = type_traits(e.id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(static_cast<uint32_t>(t->type), e.id);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->block_size, e.block_size);
    EXPECT_EQ(t->type_size, e.type_size);
    EXPECT_EQ(t->can_dequantize, e.dq);
    EXPECT_EQ(t->can_quantize, e.q);
    EXPECT_EQ(&traits(t->type), &traits(t->type));  // a stable reference
    EXPECT_EQ(block_size(t->type), e.block_size);
    EXPECT_EQ(type_size(t->type), e.type_size);
  }
}

TEST(TypeTraitsTest, OnlyExpectedIdsAreKnown) {
  size_t known = 0;
  for (uint32_t id = 0; id < 2048; ++id) {
    if (type_traits(id)) ++known;
  }
  EXPECT_EQ(known, std::size(kExpected));
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(type_traits(id).has_value()) << id;
  }
  EXPECT_EQ(type_name(static_cast<GgmlType>(4)), "unknown");
  EXPECT_EQ(type_name(static_cast<GgmlType>(1000)), "unknown");
}

TEST(TypeTraitsTest, BlockStructsMatchTable) {
  EXPECT_EQ(sizeof(block_q4_0), type_size(GgmlType::Q4_0));
  EXPECT_EQ(sizeof(block_q4_1), type_size(GgmlType::Q4_1));
  EXPECT_EQ(sizeof(block_q5_0), type_size(GgmlType::Q5_0));
  EXPECT_EQ(sizeof(block_q5_1), type_size(GgmlType::Q5_1));
  EXPECT_EQ(sizeof(block_q8_0), type_size(GgmlType::Q8_0));
  EXPECT_EQ(sizeof(block_q8_1), type_size(GgmlType::Q8_1));
  EXPECT_EQ(sizeof(block_q2_K), type_size(GgmlType::Q2_K));
  EXPECT_EQ(sizeof(block_q3_K), type_size(GgmlType::Q3_K));
  EXPECT_EQ(sizeof(block_q4_K), type_size(GgmlType::Q4_K));
  EXPECT_EQ(sizeof(block_q5_K), type_size(GgmlType::Q5_K));
  EXPECT_EQ(sizeof(block_q6_K), type_size(GgmlType::Q6_K));
  EXPECT_EQ(sizeof(block_q8_K), type_size(GgmlType::Q8_K));
  EXPECT_EQ(sizeof(block_iq4_nl), type_size(GgmlType::IQ4_NL));
}

TEST(TypeTraitsTest, NamesRoundTripCaseInsensitively) {
  for (const ExpectedType& e : kExpected) {
    const GgmlType t = static_cast<GgmlType>(e.id);
    EXPECT_EQ(type_from_name(type_name(t)), t) << e.name;
    std::string upper = e.name;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](char c) { return static_cast<char>(std::toupper(c)); });
    EXPECT_EQ(type_from_name(upper), t) << upper;
  }
  EXPECT_EQ(type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("IQ4_nl"), GgmlType::IQ4_NL);
  EXPECT_EQ(type_from_name("BF16"), GgmlType::BF16);
  for (const char* bad : {"", "q4", "q4_2", "f32 ", " f32", "q4_0\n", "float", "unknown"}) {
    EXPECT_FALSE(type_from_name(bad).has_value()) << '"' << bad << '"';
  }
}

// ---- row arithmetic -------------------------------------------------------------------------

TEST(RowTest, RowSize) {
  EXPECT_EQ(row_size(GgmlType::F32, 0), 0u);
  EXPECT_EQ(row_size(GgmlType::F32, 7), 28u);
  EXPECT_EQ(row_size(GgmlType::F16, 3), 6u);
  EXPECT_EQ(row_size(GgmlType::Q4_0, 64), 36u);
  EXPECT_EQ(row_size(GgmlType::Q8_0, 4096), 4096u / 32 * 34);
  EXPECT_EQ(row_size(GgmlType::Q4_K, 512), 288u);
  EXPECT_EQ(row_size(GgmlType::Q6_K, 256 * 1000), 210u * 1000);
  EXPECT_EQ(row_size(GgmlType::Q8_K, int64_t{256} << 24), size_t{292} << 24);
}

TEST(RowTest, CheckRowShape) {
  EXPECT_TRUE(check_row_shape(GgmlType::Q4_0, 0).ok());
  EXPECT_TRUE(check_row_shape(GgmlType::Q4_0, 96).ok());
  EXPECT_TRUE(check_row_shape(GgmlType::F32, 5).ok());

  Status st = check_row_shape(GgmlType::Q4_0, 33);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q4_0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("33"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("32"), std::string::npos) << st.message();

  st = check_row_shape(GgmlType::Q4_K, 128);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q4_K"), std::string::npos) << st.message();

  st = check_row_shape(GgmlType::F16, -1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("-1"), std::string::npos) << st.message();

  st = check_row_shape(static_cast<GgmlType>(4), 32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST(RowDeathTest, RowSizeOfBadShapeIsABug) {
  EXPECT_DEATH((void)row_size(GgmlType::Q4_0, 31), "q4_0");
  EXPECT_DEATH((void)traits(static_cast<GgmlType>(5)), "unknown ggml type id 5");
}

TEST(RowTest, ConvertErrors) {
  std::vector<float> f(512);
  std::vector<uint8_t> b(4096);
  Status st = quantize_row(GgmlType::Q2_K, f.data(), b.data(), 256);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_EQ(st.message(), "type q2_K is not supported for quantize");
  st = dequantize_row(GgmlType::IQ2_XXS, b.data(), f.data(), 256);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_EQ(st.message(), "type iq2_xxs is not supported for dequantize");
  st = dequantize_row(GgmlType::Q8_1, b.data(), f.data(), 32);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  st = dequantize_row(GgmlType::Q4_0, b.data(), f.data(), 48);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = quantize_row(GgmlType::Q8_0, f.data(), b.data(), -32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  // n = 0 is a valid empty row for every supported type.
  for (const ExpectedType& e : kExpected) {
    const GgmlType t = static_cast<GgmlType>(e.id);
    if (e.dq) {
      EXPECT_TRUE(dequantize_row(t, b.data(), f.data(), 0).ok()) << e.name;
    }
    if (e.q) {
      EXPECT_TRUE(quantize_row(t, f.data(), b.data(), 0).ok()) << e.name;
    }
  }
}

// ---- fp16 / bf16 ----------------------------------------------------------------------------

// Value of a half bit pattern, decoded from the IEEE 754 definition in double (independent of
// the code under test). Inf / NaN excluded.
double half_value(uint16_t h) {
  const int s = h >> 15;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}

// Round-to-nearest-even of a finite float into a format whose non-negative finite codes
// 0..top-1 have increasing values value(c), with `top` the code of +inf and `value_top` the
// value that code would have with an unbounded exponent (so overflow follows the IEEE rule).
template <typename ValueFn>
uint16_t ref_round(float f, uint16_t top, double value_top, ValueFn value) {
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a >= value_top) return sign | top;
  uint16_t lo = 0;  // largest code with value <= a
  uint16_t hi = top;
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (value(mid) <= a)
      lo = mid;
    else
      hi = mid;
  }
  const double vlo = value(lo);
  const double vhi = lo + 1 == top ? value_top : value(static_cast<uint16_t>(lo + 1));
  uint16_t c;
  if (a - vlo < vhi - a) {
    c = lo;
  } else if (a - vlo > vhi - a) {
    c = static_cast<uint16_t>(lo + 1);
  } else {
    c = (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;  // tie: even code
  }
  return sign | c;
}

uint16_t ref_fp16(float f) { return ref_round(f, 0x7c00, 65536.0, half_value); }
uint16_t ref_bf16(float f) {
  return ref_round(f, 0x7f80, std::ldexp(1.0, 128), [](uint16_t c) {
    return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(c) << 16));
  });
}

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(Fp16Test, DecodesEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 0x1f;
    if (e == 0x1f) {
      if ((h & 0x3ff) == 0) {
        EXPECT_TRUE(std::isinf(f)) << h;
      } else {
        // NaN, payload kept, quiet bit set.
        const uint32_t u = std::bit_cast<uint32_t>(f);
        EXPECT_TRUE(std::isnan(f)) << h;
        EXPECT_EQ(u & 0x003fe000u, (h & 0x1ffu) << 13) << h;
        EXPECT_TRUE(u & 0x00400000u) << h;
      }
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), half_value(static_cast<uint16_t>(h))) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;  // exact values survive the round trip
  }
}

TEST(Fp16Test, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(inf), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-inf), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::quiet_NaN()), 0xfe00);
  EXPECT_EQ(fp32_to_fp16(from_bits(0x7f800001u)), 0x7e00);  // signaling NaN, tiny payload
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);                // largest half
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);              // just below the midpoint
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);                // midpoint: ties to even = inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 ulp: tie to even (2)
  EXPECT_EQ(fp32_to_fp16(5 * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 ulp: tie to even (2)
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);            // tie -> even (down)
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);        // tie -> even (up)
  EXPECT_EQ(fp32_to_fp16(2047.0f / 1024 + std::ldexp(1.0f, -11)), 0x4000);  // carry into exp
  // Largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
}

// Every half code's value, the midpoints between neighbours, and one float ulp either side.
std::vector<float> rounding_probes(uint16_t top, double value_top, double (*value)(uint16_t)) {
  std::vector<float> probes;
  for (uint32_t c = 0; c < top; ++c) {
    const double v = value(static_cast<uint16_t>(c));
    const double next = c + 1 == top ? value_top : value(static_cast<uint16_t>(c + 1));
    const float mid = static_cast<float>((v + next) / 2);  // exact in float for both formats
    for (float f : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      probes.push_back(f);
      probes.push_back(-f);
    }
  }
  return probes;
}

TEST(Fp16Test, RoundsLikeTheIeeeReference) {
  const std::vector<float> probes = rounding_probes(0x7c00, 65536.0, half_value);
  for (float f : probes) ASSERT_EQ(fp32_to_fp16(f), ref_fp16(f)) << f;
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), ref_fp16(f)) << f;
  }
#ifdef __FLT16_MAX__
  // A second, hardware-or-libgcc opinion where the compiler has _Float16.
  for (int i = 0; i < 2000000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    ASSERT_EQ(fp32_to_fp16(f), std::bit_cast<uint16_t>(h)) << f;
  }
#endif
}

double bf16_value(uint16_t c) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(c) << 16));
}

TEST(Bf16Test, EdgeCasesAndRounding) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f800001u)), 0x7fc0);             // signaling -> quiet
  EXPECT_EQ(fp32_to_bf16(from_bits(0xff812345u)), 0xffc1);             // sign and top payload kept
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // tie -> even (down)
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);    // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00010000u)), 0x0001);             // subnormals kept
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);             // subnormal tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(c));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), c << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), c);
    }
  }
  for (float f : rounding_probes(0x7f80, std::ldexp(1.0, 128), bf16_value)) {
    ASSERT_EQ(fp32_to_bf16(f), ref_bf16(f)) << f;
  }
  std::mt19937 rng(8);
  for (int i = 0; i < 2000000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), ref_bf16(f)) << f;
  }
}

// ---- hand-built blocks ----------------------------------------------------------------------

std::vector<float> dequant(GgmlType t, const void* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(dequantize_row(t, src, out.data(), n).ok());
  return out;
}

TEST(DequantizeTest, Q4_0KnownBlock) {
  block_q4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequant(GgmlType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8)) << j;
  }
}

TEST(DequantizeTest, Q5_1KnownBlock) {
  block_q5_1 b{};
  b.d = fp32_to_fp16(2.0f);
  b.m = fp32_to_fp16(-1.0f);
  const uint32_t qh = 0x80000001u;  // fifth bit of element 0 and element 31
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(3 | (5 << 4));
  const std::vector<float> y = dequant(GgmlType::Q5_1, &b, 32);
  EXPECT_EQ(y[0], 2.0f * 19 - 1);
  EXPECT_EQ(y[1], 2.0f * 3 - 1);
  EXPECT_EQ(y[16], 2.0f * 5 - 1);
  EXPECT_EQ(y[31], 2.0f * 21 - 1);
}

TEST(DequantizeTest, Q4_KScalesAndMins) {
  block_q4_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.25f);
  // Sub-block 1: scale 5, min 9 (j < 4 form). Sub-block 6: scale 0x2a = 42, min 0x37 = 55
  // (j >= 4 form: low nibbles in scales[10], high bits in scales[2] / scales[6]).
  b.scales[1] = 5;
  b.scales[5] = 9;
  b.scales[10] = 0x7a;                         // scale low nibble 0xa, min low nibble 0x7
  b.scales[2] = static_cast<uint8_t>(2 << 6);  // scale high bits 0b10
  b.scales[6] = static_cast<uint8_t>(3 << 6);  // min high bits 0b11
  for (int l = 0; l < 32; ++l) {
    b.qs[l] = static_cast<uint8_t>(0x0c << 4);  // elements 32..63: q = 12 (sub-block 1)
    b.qs[96 + l] = static_cast<uint8_t>(0x03);  // elements 192..223: q = 3 (sub-block 6)
  }
  const std::vector<float> y = dequant(GgmlType::Q4_K, &b, 256);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[40], 5.0f * 12 - 0.25f * 9);
  EXPECT_EQ(y[200], 42.0f * 3 - 0.25f * 55);
}

TEST(DequantizeTest, Q6_KLayout) {
  block_q6_K b{};
  b.d = fp32_to_fp16(1.0f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j + 1);
  // Element 128 + 64 + 3: high nibble of ql[64 + 3], bits 4..5 of qh[32 + 3]; q = 0x2f - 32.
  b.ql[64 + 3] = 0xf0;
  b.qh[32 + 3] = 0x20;
  const std::vector<float> y = dequant(GgmlType::Q6_K, &b, 256);
  EXPECT_EQ(y[195], static_cast<float>((195 / 16) + 1) * (0x2f - 32));
  EXPECT_EQ(y[0], 1.0f * -32);
}

TEST(DequantizeTest, IQ4_NLUsesTheTable) {
  block_iq4_nl b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequant(GgmlType::IQ4_NL, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kIq4nlValues[j]);
    EXPECT_EQ(y[j + 16], 0.5f * kIq4nlValues[15 - j]);
  }
}

TEST(QuantizeTest, Q8_KBsumsAndZeroBlocks) {
  std::vector<float> x(512, 0.0f);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int i = 256; i < 512; ++i) x[i] = dist(rng);
  block_q8_K b[2];
  std::memset(b, 0xab, sizeof(b));
  ASSERT_TRUE(quantize_row(GgmlType::Q8_K, x.data(), b, 512).ok());
  EXPECT_EQ(b[0].d, 0.0f);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(b[0].qs[j], 0);
  for (int g = 0; g < 16; ++g) {
    EXPECT_EQ(b[0].bsums[g], 0);
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += b[1].qs[16 * g + l];
    EXPECT_EQ(b[1].bsums[g], sum);
  }
  // The element of largest magnitude maps to -127 exactly (d = max / -127).
  const auto it = std::max_element(x.begin() + 256, x.end(),
                                   [](float a, float c) { return std::fabs(a) < std::fabs(c); });
  EXPECT_EQ(b[1].qs[it - (x.begin() + 256)], -127);
}

TEST(QuantizeTest, ZeroBlocksFollowGgmlSignedZeros) {
  // ggml's running signed max starts at +0.0, so an all-zero block gets d = +0.0 / -8 = -0.0
  // (fp16 0x8000) for Q4_0 / Q5_0 whatever the zeros' signs; Q8_0 uses |max| / 127 = +0.0.
  const std::vector<float> x(32, -0.0f);
  block_q4_0 b4;
  ASSERT_TRUE(quantize_row(GgmlType::Q4_0, x.data(), &b4, 32).ok());
  EXPECT_EQ(b4.d, 0x8000);
  block_q5_0 b5;
  ASSERT_TRUE(quantize_row(GgmlType::Q5_0, x.data(), &b5, 32).ok());
  EXPECT_EQ(b5.d, 0x8000);
  block_q8_0 b8;
  ASSERT_TRUE(quantize_row(GgmlType::Q8_0, x.data(), &b8, 32).ok());
  EXPECT_EQ(b8.d, 0x0000);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b8.qs[j], 0);
  block_iq4_nl bi;
  ASSERT_TRUE(quantize_row(GgmlType::IQ4_NL, x.data(), &bi, 32).ok());
  EXPECT_EQ(bi.d, 0x0000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(bi.qs[j], 0);  // indices of a d = 0 block: all 0
}

// ---- round trips ----------------------------------------------------------------------------

// Worst absolute error allowed for one element of a block, from the block's statistics. The
// bounds follow from each format's rounding (half a step, or one step where the reference clamps
// the extreme level) plus fp16 storage of the scale (relative 2^-11) and 1% slack.
struct BlockStats {
  float amax;  // max |x|
  float min;
  float max;
};

float allowed_error(GgmlType t, const BlockStats& s) {
  const float fp16_rel = std::ldexp(1.0f, -11);
  switch (t) {
    case GgmlType::F32:
      return 0.0f;
    case GgmlType::F16:  // relative half-ulp for normals, absolute 2^-25 for subnormals
      return s.amax * std::ldexp(1.0f, -11) + std::ldexp(1.0f, -25);
    case GgmlType::BF16:
      return s.amax * std::ldexp(1.0f, -8) * 1.0001f;
    case GgmlType::Q8_0:  // step amax/127, round to nearest
      return s.amax / 127 * (0.5f + 127 * fp16_rel) * 1.01f;
    case GgmlType::Q4_0:  // step amax/8; one side clamps at level 7 of 8: one full step
      return s.amax / 8 * (1.0f + 8 * fp16_rel) * 1.01f;
    case GgmlType::Q5_0:
      return s.amax / 16 * (1.0f + 16 * fp16_rel) * 1.01f;
    case GgmlType::Q4_1: {  // step range/15, round to nearest; min stored as fp16
      const float d = (s.max - s.min) / 15;
      return (d * (0.5f + 15 * fp16_rel) + std::fabs(s.min) * fp16_rel) * 1.01f + 1e-30f;
    }
    case GgmlType::Q5_1: {
      const float d = (s.max - s.min) / 31;
      return (d * (0.5f + 31 * fp16_rel) + std::fabs(s.min) * fp16_rel) * 1.01f + 1e-30f;
    }
    case GgmlType::Q8_K:  // float scale amax/127, round to nearest
      return s.amax / 127 * 0.5f * 1.01f;
    case GgmlType::IQ4_NL:
      // No closed form: levels are up to 24 units apart over [-127, 113] (half-gaps of 12 and
      // 14 units of amax/127 = 0.1 amax), and the least-squares refit of the scale moves them.
      // Measured worst case over 3.2M elements of normal / uniform / Student-t data: 0.14 amax.
      return s.amax * 0.2f;
    default:
      return 0.0f;
  }
}

std::vector<float> make_row(int kind, int64_t n, std::mt19937* rng) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        x[i] = normal(*rng);
        break;
      case 1:
        x[i] = uni(*rng) * 3e4f;
        break;  // large magnitudes
      case 2:
        x[i] = -std::fabs(normal(*rng)) - 0.5f;
        break;  // negative only
      case 3:
        x[i] = 0.0f;
        break;  // zeros
      case 4:
        x[i] = normal(*rng) * std::pow(10.0f, static_cast<float>(i % 7) - 3);
        break;
      case 5:
        x[i] = 1e-3f * normal(*rng) + 7.0f;
        break;  // offset, small range
      default:
        x[i] = (i % 32 == 5) ? 50.0f : 0.01f * normal(*rng);
        break;  // outliers
    }
  }
  return x;
}

class RoundTripTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(RoundTripTest, ErrorWithinBound) {
  const GgmlType t = GetParam();
  const int64_t bs = block_size(t) == 1 ? 32 : block_size(t);
  const int64_t n = bs * 24;
  std::mt19937 rng(1234);
  for (int kind = 0; kind < 7; ++kind) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    const std::vector<float> x = make_row(kind, n, &rng);
    std::vector<uint8_t> q(row_size(t, n) + 4);
    std::vector<float> y(static_cast<size_t>(n), -1.0f);
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
    ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
    double max_ratio = 0.0;
    for (int64_t b0 = 0; b0 < n; b0 += bs) {
      BlockStats s{0.0f, x[b0], x[b0]};
      for (int64_t i = b0; i < b0 + bs; ++i) {
        s.amax = std::max(s.amax, std::fabs(x[i]));
        s.min = std::min(s.min, x[i]);
        s.max = std::max(s.max, x[i]);
      }
      const float bound = allowed_error(t, s);
      for (int64_t i = b0; i < b0 + bs; ++i) {
        const float err = std::fabs(y[i] - x[i]);
        ASSERT_LE(err, bound) << "element " << i << " x=" << x[i] << " y=" << y[i];
        if (s.amax > 0) max_ratio = std::max(max_ratio, static_cast<double>(err / s.amax));
      }
      if (kind == 3) {
        for (int64_t i = b0; i < b0 + bs; ++i) ASSERT_EQ(y[i], 0.0f) << i;
      }
    }
    RecordProperty("max_err_over_amax_kind" + std::to_string(kind), std::to_string(max_ratio));
  }
}

TEST_P(RoundTripTest, QuantizeIsIdempotentOnItsOwnOutput) {
  // Dequantized values are exactly representable, so quantizing them again must reproduce them
  // (for every type whose levels are uniform and whose scale comes from the data's extremes).
  const GgmlType t = GetParam();
  if (t == GgmlType::IQ4_NL) GTEST_SKIP() << "least-squares scale refit is not a fixed point";
  const int64_t bs = block_size(t) == 1 ? 32 : block_size(t);
  const int64_t n = bs * 8;
  std::mt19937 rng(99);
  const std::vector<float> x = make_row(0, n, &rng);
  std::vector<uint8_t> q(row_size(t, n));
  std::vector<float> y(static_cast<size_t>(n));
  std::vector<float> z(static_cast<size_t>(n));
  ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
  ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
  ASSERT_TRUE(quantize_row(t, y.data(), q.data(), n).ok());
  ASSERT_TRUE(dequantize_row(t, q.data(), z.data(), n).ok());
  double max_diff = 0.0;
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(z[i] - y[i])));
    amax = std::max(amax, std::fabs(y[i]));
  }
  // The scale is re-derived (and re-rounded to fp16), so allow one fp16 rounding of it.
  EXPECT_LE(max_diff, amax * std::ldexp(1.0, -9));
}

TEST_P(RoundTripTest, RelativeRmseOnNormalData) {
  // Relative RMS error on N(0, 1) data, a regression guard on the quality of each format.
  // Ceilings are about 1.3x the values measured with ggml's reference rounding.
  const GgmlType t = GetParam();
  double ceiling = 0.0;
  switch (t) {
    case GgmlType::F32:
      ceiling = 0.0;
      break;
    case GgmlType::F16:
      ceiling = 3e-4;
      break;
    case GgmlType::BF16:
      ceiling = 2.5e-3;
      break;
    case GgmlType::Q8_0:
      ceiling = 7e-3;
      break;
    case GgmlType::Q8_K:
      ceiling = 9.5e-3;
      break;
    case GgmlType::Q5_0:
      ceiling = 0.056;
      break;
    case GgmlType::Q5_1:
      ceiling = 0.05;
      break;
    case GgmlType::Q4_0:
      ceiling = 0.11;
      break;
    case GgmlType::Q4_1:
      ceiling = 0.10;
      break;
    case GgmlType::IQ4_NL:
      ceiling = 0.105;
      break;
    default:
      FAIL() << "no ceiling for " << type_name(t);
  }
  const int64_t n = 256 * 256;
  std::mt19937 rng(4321);
  const std::vector<float> x = make_row(0, n, &rng);
  std::vector<uint8_t> q(row_size(t, n));
  std::vector<float> y(static_cast<size_t>(n));
  ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
  ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
  double se = 0.0;
  double sx = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    se += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    sx += static_cast<double>(x[i]) * x[i];
  }
  const double rel = std::sqrt(se / sx);
  RecordProperty("relative_rmse", std::to_string(rel));
  EXPECT_LE(rel, ceiling);
}

std::string type_param_name(const ::testing::TestParamInfo<GgmlType>& info) {
  return std::string(type_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllQuantizable, RoundTripTest,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_K,
                                           GgmlType::IQ4_NL),
                         type_param_name);

TEST(RoundTripCoverageTest, EveryQuantizableTypeIsCovered) {
  int n = 0;
  for (const ExpectedType& e : kExpected) n += e.q ? 1 : 0;
  EXPECT_EQ(n, 10);  // the list in INSTANTIATE_TEST_SUITE_P above
}

}  // namespace
}  // namespace mnemo
