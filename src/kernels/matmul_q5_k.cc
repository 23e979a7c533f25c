// Matmul with Q5_K weights: the row unpacker (quant_unpack-inl.h) and the entry point that
// dispatches the whole operation to the best target. One translation unit per weight type,
// compiled once per Highway target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_q5_k.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

#if MNEMO_INT_DOT
void UnpackRowQ5_K(const uint8_t* row, int64_t n_in, int64_t n_pad, int64_t n_off, uint8_t* w8,
                   float* dw, float* cw) {
  UnpackQ5_K(row, n_in, n_pad, n_off, w8, dw, cw);
}
#endif

void MatmulQ5_K(const internal::MatmulArgs& args) {
#if MNEMO_INT_DOT
  IntKernel kernel;
  GetIntKernel(GgmlType::Q5_K, &kernel);
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
HWY_EXPORT(MatmulQ5_K);
namespace internal {
void matmul_q5_K(const MatmulArgs& args) { HWY_DYNAMIC_DISPATCH(MatmulQ5_K)(args); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
