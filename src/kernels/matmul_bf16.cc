// Matmul with BF16 weights: the float row unpacker (quant_unpack-inl.h) and the entry point
// that dispatches the whole operation to the best target. One translation unit per weight type,
// compiled once per Highway target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

void UnpackRowBF16(GgmlType /*type*/, const uint8_t* row, int64_t n_in, int64_t n_pad, float* out) {
  UnpackBF16(row, n_in, n_pad, out);
}

void MatmulBF16(const internal::MatmulArgs& args) { MatmulFloat(args, &UnpackRowBF16); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mnemo::kernels {
HWY_EXPORT(MatmulBF16);
namespace internal {
void matmul_bf16(const MatmulArgs& args) { HWY_DYNAMIC_DISPATCH(MatmulBF16)(args); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
