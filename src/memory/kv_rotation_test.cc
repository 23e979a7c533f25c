// Hadamard rotation against the explicit matrix, and row conversion between storage formats.
#include "memory/kv_rotation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/state_test_util.h"

namespace mnemo {
namespace {

std::vector<float> ramp(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = testing::kv_value(7, 0, 'K', uint32_t(i));
  return x;
}

TEST(KvRotationTest, MatchesExplicitMatrixAndIsItsOwnInverse) {
  for (uint32_t d : {2u, 4u, 32u, 64u, 128u, 256u}) {
    const std::vector<float> x = ramp(3 * d);
    std::vector<float> y = x;
    hadamard_rotate(y.data(), int64_t(y.size()), d);
    const std::vector<float> ref = testing::ref_hadamard(x, d);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(y[i], ref[i], 1e-5f * 12) << "d " << d << " i " << i;
      nx += double(x[i]) * x[i];
      ny += double(y[i]) * y[i];
    }
    EXPECT_NEAR(ny, nx, 1e-4 * nx) << "orthonormal: the norm is kept";
    hadamard_rotate(y.data(), int64_t(y.size()), d);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f * 12);
  }
}

TEST(KvRotationTest, ValidSizesAndPolicy) {
  EXPECT_TRUE(is_valid_kv_rotation(0));
  EXPECT_TRUE(is_valid_kv_rotation(64));
  EXPECT_FALSE(is_valid_kv_rotation(1));
  EXPECT_FALSE(is_valid_kv_rotation(80));
  EXPECT_FALSE(is_valid_kv_rotation(8192));
  EXPECT_EQ(kv_rotation_for(64, GgmlType::F16, GgmlType::F16), 0u);
  EXPECT_EQ(kv_rotation_for(64, GgmlType::BF16, GgmlType::F32), 0u);
  EXPECT_EQ(kv_rotation_for(64, GgmlType::F16, GgmlType::Q4_0), 64u);
  EXPECT_EQ(kv_rotation_for(64, GgmlType::IQ4_NL, GgmlType::IQ4_NL), 64u);
  EXPECT_EQ(kv_rotation_for(0, GgmlType::Q4_0, GgmlType::Q4_0), 0u);
}

// Rotation is what makes 4-bit K/V usable on rows with outlier channels: the round-trip error
// of q4_0 with rotation must be clearly below the error without it.
TEST(KvRotationTest, RotationReducesFourBitError) {
  const uint32_t n = 256;
  const std::vector<float> x = ramp(n);
  // x to q4_0 stored with `rotation` (rotated on the way in) and back (un-rotated on the way
  // out): *error receives the relative RMS error of the round trip.
  const auto round_trip = [&](uint32_t rotation, double* error) {
    std::vector<uint8_t> q(row_size(GgmlType::Q4_0, n));
    std::vector<float> scratch(n), back(n);
    ASSERT_TRUE(kv_row_convert(GgmlType::F32, 0, x.data(), GgmlType::Q4_0, rotation, q.data(), n,
                               scratch.data())
                    .ok());
    ASSERT_TRUE(kv_row_convert(GgmlType::Q4_0, rotation, q.data(), GgmlType::F32, 0, back.data(), n,
                               scratch.data())
                    .ok());
    *error = testing::rel_rms(back, x);
  };
  double plain = 0, rotated = 0;
  ASSERT_NO_FATAL_FAILURE(round_trip(0, &plain));
  ASSERT_NO_FATAL_FAILURE(round_trip(64, &rotated));
  EXPECT_LT(rotated, 0.75 * plain) << "plain " << plain << " rotated " << rotated;
}

TEST(KvRotationTest, ConvertHandlesMisalignedRows) {
  const uint32_t n = 64;
  const std::vector<float> x = ramp(n);
  std::vector<uint8_t> q(row_size(GgmlType::Q8_0, n) + 1);
  std::vector<float> scratch(n), back(n);
  ASSERT_TRUE(kv_row_convert(GgmlType::F32, 0, x.data(), GgmlType::Q8_0, 32, q.data() + 1, n,
                             scratch.data())
                  .ok());
  ASSERT_TRUE(kv_row_convert(GgmlType::Q8_0, 32, q.data() + 1, GgmlType::F32, 0, back.data(), n,
                             scratch.data())
                  .ok());
  EXPECT_LT(testing::rel_rms(back, x), 0.01);
}

}  // namespace
}  // namespace mnemo
