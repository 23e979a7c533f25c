// The matmul core (activation quantization, micro-kernels, tiling and threading), compiled once
// per Highway target; the code is in matmul_core-inl.h. Also the target-name query and the
// MNEMO_SIMD cap on the dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_core.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul_core-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }
bool IntDotActive() { return MNEMO_INT_DOT != 0; }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hwy/targets.h"

namespace mnemo::kernels {
HWY_EXPORT(TargetName);
HWY_EXPORT(IntDotActive);
const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

bool set_simd_cap(std::string_view name) {
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int64_t cap = 0;
  for (int64_t t : {int64_t{HWY_AVX3_DL}, int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4},
                    int64_t{HWY_EMU128}, int64_t{HWY_SCALAR}}) {
    if (upper == hwy::TargetName(t)) cap = t;
  }
  if (cap == 0) return false;
  // Highway numbers better targets with lower bits: disable every bit below the cap's.
  hwy::DisableTargets(cap - 1);
  return true;
}

namespace {
// MNEMO_SIMD=NAME caps the dispatch for the whole process (kernels.h set_simd_cap), before any
// kernel runs: this object is constructed with the kernels library's other statics.
struct SimdCapFromEnvironment {
  SimdCapFromEnvironment() {
    const char* name = std::getenv("MNEMO_SIMD");
    if (name == nullptr || *name == '\0') return;
    if (!set_simd_cap(name)) {
      std::fprintf(stderr,
                   "mnemo: MNEMO_SIMD=%s is not a SIMD target (AVX3_DL, AVX3, AVX2, SSE4, "
                   "SCALAR); ignored\n",
                   name);
    }
  }
};
const SimdCapFromEnvironment g_simd_cap_from_environment;
}  // namespace

namespace internal {
bool int_dot_active() { return HWY_DYNAMIC_DISPATCH(IntDotActive)(); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
