// Helpers shared by the kernels tests: running a check on every compiled Highway target, and
// random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/kernels.h"

namespace mnemo::kernels::testing {

/// Runs `check` once per Highway target that is both compiled into the kernels and supported
/// by this CPU, with dispatch forced to that target (hwy::SetSupportedTargetsForTest), and
/// verifies that the kernels really dispatch there. Restores normal dispatch afterwards.
inline void for_each_target(const std::function<void()>& check) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (const int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    SCOPED_TRACE("target " + name);
    ASSERT_EQ(std::string(simd_target()), name) << "dispatch did not pick the forced target";
    check();
  }
  hwy::SetSupportedTargetsForTest(0);
}

/// n floats ~ N(0, sigma); every `outlier_every`-th (if > 0) is scaled by 20, as activation
/// outliers in real models are.
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float sigma = 1.0f,
                                        int outlier_every = 0) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = dist(rng);
    if (outlier_every > 0 && i % outlier_every == outlier_every - 1) v[i] *= 20.0f;
  }
  return v;
}

}  // namespace mnemo::kernels::testing
