// Matmul with Q4_0 weights: the row unpacker (quant_unpack-inl.h) and the entry point that
// dispatches the whole operation to the best target. One translation unit per weight type,
// compiled once per Highway target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_q4_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if MNEMO_INT_DOT
void UnpackRowQ4_0(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw) {
  UnpackQ4_0(row, n_in, n_pad, n_off, w8, dw, cw);
}
#endif

void MatmulQ4_0(const internal::MatmulArgs& args) {
#if MNEMO_INT_DOT
  IntKernel kernel;
  GetIntKernel(GgmlType::Q4_0, &kernel);
  MatmulInt(args, kernel);
#else
  MatmulFloat(args, &UnpackRowRef);
#endif
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mnemo::kernels {
HWY_EXPORT(MatmulQ4_0);
namespace internal {
void matmul_q4_0(const MatmulArgs& args) { HWY_DYNAMIC_DISPATCH(MatmulQ4_0)(args); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
