// Matmul with F32 weights: the float row unpacker (quant_unpack-inl.h) and the entry point
// that dispatches the whole operation to the best target. One translation unit per weight type,
// compiled once per Highway target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

void UnpackRowF32(GgmlType /*type*/, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  UnpackF32(row, n_in, n_pad, out);
}

void MatmulF32(const internal::MatmulArgs& args) { MatmulFloat(args, &UnpackRowF32); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mnemo::kernels {
HWY_EXPORT(MatmulF32);
namespace internal {
void matmul_f32(const MatmulArgs& args) { HWY_DYNAMIC_DISPATCH(MatmulF32)(args); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
