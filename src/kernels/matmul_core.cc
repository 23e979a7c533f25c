// The matmul core (activation quantization, micro-kernels, tiling and threading), compiled once
// per Highway target; the code is in matmul_core-inl.h. Also the target-name query.
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
namespace mnemo::kernels {
HWY_EXPORT(TargetName);
HWY_EXPORT(IntDotActive);
const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
namespace internal {
bool int_dot_active() { return HWY_DYNAMIC_DISPATCH(IntDotActive)(); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
