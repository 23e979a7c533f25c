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

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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

// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25).
bool cpu_has_amx() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return ((edx >> 24) & 1) && ((edx >> 25) & 1);
#else
  return false;
#endif
}

// The target the process uses unless MNEMO_SIMD says otherwise: Highway's best, except that the
// AVX3_DL kernels (16-row VNNI layout, made for AMX prompt tiles) are chosen only on a CPU with
// AMX. On AMD Zen 4 (AVX-512 VNNI, no AMX) the AVX3 target's 8-row kernels were 1.3-2.3x faster
// for both prompts and generation (docs/benchmarks.md); MNEMO_SIMD=AVX3_DL still selects them.
std::string g_default_target;

// MNEMO_SIMD=NAME caps the dispatch for the whole process (kernels.h set_simd_cap), before any
// kernel runs: this object is constructed with the kernels library's other statics.
struct SimdCapFromEnvironment {
  SimdCapFromEnvironment() {
    hwy::DisableTargets(0);
    if (std::string(simd_target()) == hwy::TargetName(HWY_AVX3_DL) && !cpu_has_amx()) {
      set_simd_cap(hwy::TargetName(HWY_AVX3));
    }
    g_default_target = simd_target();
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

const char* default_simd_target() { return g_default_target.c_str(); }

namespace internal {
bool int_dot_active() { return HWY_DYNAMIC_DISPATCH(IntDotActive)(); }
}  // namespace internal
}  // namespace mnemo::kernels
#endif  // HWY_ONCE
