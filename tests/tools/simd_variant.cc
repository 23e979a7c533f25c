// Linked into the test binaries that also run under a capped SIMD target (cmake/mnemo.cmake
// mnemo_add_simd_variants): when MNEMO_SIMD names a target, every test of the binary is skipped
// unless the kernels really dispatch to that target (the CPU may lack it) and it is not already
// the CPU's best one (the plain run of the binary covers that).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "hwy/targets.h"
#include "kernels/kernels.h"

namespace mnemo {
namespace {

class SimdVariantEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* want = std::getenv("MNEMO_SIMD");
    if (want == nullptr || *want == '\0') return;
    std::string name(want);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (kernels::simd_target() != name) {
      GTEST_SKIP() << "this CPU has no " << name << " (the kernels run " << kernels::simd_target()
                   << ")";
    }
    // What the plain run of the binary uses on this CPU.
    const std::string best = kernels::default_simd_target();
    if (best == name) GTEST_SKIP() << name << " is this CPU's best target: the plain run covers it";
    std::printf("[ SIMD ] running under %s (the CPU's best: %s)\n", name.c_str(), best.c_str());
  }
};

[[maybe_unused]] ::testing::Environment* const g_simd_variant =
    ::testing::AddGlobalTestEnvironment(new SimdVariantEnvironment);

}  // namespace
}  // namespace mnemo
