// Packed weights: the per-target code is in packed-inl.h; this file compiles it once per
// Highway target and holds the public pack_matrix / matmul(PackedMatrix) entry points.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/packed.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/packed-inl.h"
#include "kernels/packed256-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mnemo::kernels::HWY_NAMESPACE {

int PackFormatForTarget(GgmlType type) { return static_cast<int>(PackedFormatFor(type)); }
/// The packed layout this target's kernels read (internal::PackedLayoutKind).
int PackLayoutForTarget() {
#if HWY_TARGET == HWY_AVX3_DL
  return static_cast<int>(internal::PackedLayoutKind::kRows16);
#elif MNEMO_HAVE_PACKED256
  return static_cast<int>(internal::PackedLayoutKind::kRows8);
#else
  return static_cast<int>(internal::PackedLayoutKind::kNone);
#endif
}
/// Bytes of one 8-row group of a matrix of `type` with rows of n_in elements; 0 where the type
/// has no 8-row format (or the target has no 8-row kernels).
int64_t Pack8GroupBytes(GgmlType type, int64_t n_in) {
#if MNEMO_HAVE_PACKED256
  p8::Fmt f;
  if (!p8::FormatOf(type, &f)) return 0;
  return p8::GroupBytes(f, n_in);
#else
  (void)type;
  (void)n_in;
  return 0;
#endif
}
void Pack8All(const internal::MatmulArgs& w, uint8_t* out, ThreadPool* pool) {
#if MNEMO_HAVE_PACKED256
  p8::Fmt f;
  CHECK(p8::FormatOf(w.type, &f));
  const int64_t group_bytes = p8::GroupBytes(f, w.n_in);
  const int64_t n_groups = internal::ceil_div(w.n_out, 8);
  constexpr int64_t kGroupsPerTask = 16;
  internal::parallel_for(pool, internal::ceil_div(n_groups, kGroupsPerTask),
                         [&](int64_t task, int) {
                           const int64_t g0 = task * kGroupsPerTask;
                           const int64_t g1 = std::min(n_groups, g0 + kGroupsPerTask);
                           p8::PackGroups(w, f, g0, g1, out + g0 * group_bytes);
                         });
#else
  (void)w;
  (void)out;
  (void)pool;
  CHECK(false) << "8-row packing runs on the AVX2 and AVX3 targets only";
#endif
}
void Packed8MatmulOp(const internal::MatmulArgs& a, const uint8_t* data) {
#if MNEMO_HAVE_PACKED256
  p8::Matmul(a, data);
#else
  (void)a;
  (void)data;
  CHECK(false) << "8-row packed matmul runs on the AVX2 and AVX3 targets only";
#endif
}
/// Packs every group of w, threads splitting the groups (one dispatch for the whole matrix).
void PackAll(const internal::MatmulArgs& w, int format, const internal::PackedLayout& layout,
             uint8_t* out, ThreadPool* pool) {
  const int64_t n_groups = internal::ceil_div(w.n_out, 16);
  constexpr int64_t kGroupsPerTask = 8;
  internal::parallel_for(pool, internal::ceil_div(n_groups, kGroupsPerTask),
                         [&](int64_t task, int) {
                           const int64_t g0 = task * kGroupsPerTask;
                           const int64_t g1 = std::min(n_groups, g0 + kGroupsPerTask);
                           PackGroups(w, static_cast<internal::PackedFormat>(format), layout, g0,
                                      g1, out + g0 * layout.group_bytes);
                         });
}
void PackedMatmulOp(const internal::MatmulArgs& a, int format, const internal::PackedLayout& layout,
                    const uint8_t* data) {
  PackedMatmul(a, static_cast<internal::PackedFormat>(format), layout, data);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace mnemo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/kernels.h"
#include "mnemo/check.h"

namespace mnemo::kernels {

HWY_EXPORT(PackFormatForTarget);
HWY_EXPORT(PackLayoutForTarget);
HWY_EXPORT(Pack8GroupBytes);
HWY_EXPORT(Pack8All);
HWY_EXPORT(Packed8MatmulOp);
HWY_EXPORT(PackAll);
HWY_EXPORT(PackedMatmulOp);

namespace internal {

PackedFormat packed_format_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return PackedFormat::kQ4_0;
    case GgmlType::Q4_1:
      return PackedFormat::kQ4_1;
    case GgmlType::Q5_0:
      return PackedFormat::kQ5_0;
    case GgmlType::Q5_1:
      return PackedFormat::kQ5_1;
    case GgmlType::Q8_0:
      return PackedFormat::kQ8_0;
    case GgmlType::Q4_K:
      return PackedFormat::kQ4_K;
    case GgmlType::Q5_K:
      return PackedFormat::kQ5_K;
    case GgmlType::Q6_K:
      return PackedFormat::kQ6_K;
    default:
      return PackedFormat::kNone;
  }
}

PackedFormatInfo packed_format_info(PackedFormat f) {
  switch (f) {
    case PackedFormat::kQ4_0:
      return {kPackU4, 32, true, 8};
    case PackedFormat::kQ4_1:
      return {kPackU4, 32, true, -1};
    case PackedFormat::kQ5_0:
      return {kPackU5, 32, true, 16};
    case PackedFormat::kQ5_1:
      return {kPackU5, 32, true, -1};
    case PackedFormat::kQ8_0:
      return {kPackU8, 32, true, 128};
    case PackedFormat::kIQ4_NL:
      return {kPackU8, 32, true, 128};
    case PackedFormat::kQ4_K:
      return {kPackU4, 32, false, -1};
    case PackedFormat::kQ5_K:
      return {kPackU5, 32, false, -1};
    case PackedFormat::kQ6_K:
      return {kPackU6, 16, false, 32};
    default:
      CHECK(false) << "no packed format " << static_cast<int>(f);
  }
  return {};
}

PackedLayout packed_layout(PackedFormat f, int64_t n_in) {
  const PackedFormatInfo info = packed_format_info(f);
  PackedLayout l;
  l.n_sub = n_in / info.sub;
  l.sub_quant_bytes = info.kind == kPackU8   ? 16 * info.sub
                      : info.kind == kPackU4 ? 8 * info.sub
                      : info.kind == kPackU5 ? 8 * info.sub + 2 * info.sub   // + masks
                                             : 8 * info.sub + 4 * info.sub;  // + high pairs
  const int64_t offsets = info.offset < 0 ? 1 : 0;
  if (info.f16_scales) {  // one span: quants, fp16 scales, fp16 offsets
    l.subs_per_span = l.n_sub;
    l.quants_offset = 0;
    l.scales_offset = l.n_sub * l.sub_quant_bytes;
    l.offsets_offset = l.scales_offset + l.n_sub * 32;
    l.super_offset = 0;  // no super-block scales
    l.span_bytes = round_up(l.offsets_offset + offsets * l.n_sub * 32, 64);
  } else {  // per 256 elements: super-block d (dmin), int8 scales (mins), quants
    l.subs_per_span = 256 / info.sub;
    l.super_offset = 0;
    l.scales_offset = 32 * (1 + offsets);
    l.offsets_offset = l.scales_offset + 16 * l.subs_per_span;
    l.quants_offset = round_up(l.offsets_offset + offsets * 16 * l.subs_per_span, 64);
    l.span_bytes = l.quants_offset + l.subs_per_span * l.sub_quant_bytes;
  }
  l.group_bytes = l.n_sub / l.subs_per_span * l.span_bytes;
  return l;
}

PackedLayoutKind packed_layout_kind() {
  return static_cast<PackedLayoutKind>(HWY_DYNAMIC_DISPATCH(PackLayoutForTarget)());
}

bool packed_kernels_active() { return packed_layout_kind() != PackedLayoutKind::kNone; }

namespace {
std::atomic<bool> g_amx_disabled_for_test{false};
}  // namespace

void set_amx_disabled_for_test(bool disabled) { g_amx_disabled_for_test.store(disabled); }

bool amx_available() {
  if (g_amx_disabled_for_test.load(std::memory_order_relaxed)) return false;
  static const bool available = [] {
#if defined(__x86_64__) && defined(__linux__)
    if (std::getenv("MNEMO_NO_AMX") != nullptr) return false;
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_tile = (edx >> 24) & 1, amx_int8 = (edx >> 25) & 1;
    if (!amx_tile || !amx_int8) return false;
    // Linux hands out the 8 KB tile state only on request (ARCH_REQ_XCOMP_PERM, feature 18).
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return available;
}

namespace {
int64_t far_prefetch_for_this_cpu() {
  if (const char* env = std::getenv("MNEMO_PREFETCH_FAR"); env != nullptr) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 64 && v <= (1 << 20)) return v / 64 * 64;
    if (*env != '\0') {
      std::fprintf(stderr,
                   "mnemo: MNEMO_PREFETCH_FAR=%s is not a byte count from 64 to 1048576; "
                   "ignored\n",
                   env);
    }
  }
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // Vendor string of leaf 0: "AuthenticAMD" is ebx "Auth", edx "enti", ecx "cAMD".
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == 0x68747541 && edx == 0x69746e65 &&
      ecx == 0x444d4163) {
    return 16384;
  }
#endif
  return 4096;
}
}  // namespace

const int64_t g_far_prefetch_bytes = far_prefetch_for_this_cpu();

}  // namespace internal

void PackedMatrix::Free::operator()(void* p) const {
  if (owned) std::free(p);
}

PackedImage packed_image(const PackedMatrix& m) {
  PackedImage img;
  if (!m.is_packed()) return img;
  img.data = m.data_.get();
  img.bytes = m.bytes_;
  img.format = m.format_;
  img.layout = m.layout_;
  img.group_bytes = m.group_bytes_;
  return img;
}

namespace {

/// What pack_matrix(w) makes under the current target, without its bytes (data null): format,
/// layout, group size and byte count; bytes == 0 when w is not packed there.
PackedImage packed_shape(const WeightMatrix& w) {
  PackedImage img;
  if (w.n_out == 0 || !matmul_supports(w.type) || w.n_in <= 0 || w.n_in % block_size(w.type) != 0) {
    return img;
  }
  const internal::PackedLayoutKind kind = internal::packed_layout_kind();
  if (kind == internal::PackedLayoutKind::kRows16) {
    const auto f =
        static_cast<internal::PackedFormat>(HWY_DYNAMIC_DISPATCH(PackFormatForTarget)(w.type));
    if (f == internal::PackedFormat::kNone) return img;
    img.format = static_cast<int>(f);
    img.group_bytes = internal::packed_layout(f, w.n_in).group_bytes;
    img.bytes = static_cast<size_t>(internal::ceil_div(w.n_out, 16) * img.group_bytes);
  } else if (kind == internal::PackedLayoutKind::kRows8) {
    img.group_bytes = HWY_DYNAMIC_DISPATCH(Pack8GroupBytes)(w.type, w.n_in);
    if (img.group_bytes == 0) return img;
    img.bytes = static_cast<size_t>(
        internal::round_up(internal::ceil_div(w.n_out, 8) * img.group_bytes, 64));
  } else {
    return img;
  }
  img.layout = static_cast<int>(kind);
  return img;
}

}  // namespace

size_t packed_size(const WeightMatrix& w) { return packed_shape(w).bytes; }

PackedMatrix adopt_packed(const WeightMatrix& w, const PackedImage& img) {
  PackedMatrix pm;
  pm.source_ = w;
  if (img.data == nullptr || reinterpret_cast<uintptr_t>(img.data) % 64 != 0) return pm;
  const PackedImage want = packed_shape(w);
  if (want.bytes == 0 || img.layout != want.layout || img.format != want.format ||
      img.group_bytes != want.group_bytes || img.bytes != want.bytes) {
    return pm;
  }
  pm.data_ = std::unique_ptr<void, PackedMatrix::Free>(const_cast<void*>(img.data),
                                                       PackedMatrix::Free{false});
  pm.bytes_ = want.bytes;
  pm.format_ = want.format;
  pm.group_bytes_ = want.group_bytes;
  pm.layout_ = want.layout;
  return pm;
}

PackedMatrix packed_rows(const PackedMatrix& m, int64_t n_rows) {
  CHECK(n_rows >= 0 && n_rows <= m.source_.n_out)
      << "packed_rows: " << n_rows << " rows of " << m.source_.n_out;
  PackedMatrix pm;
  pm.source_ = m.source_;
  pm.source_.n_out = n_rows;
  if (!m.is_packed() || n_rows == 0) return pm;
  size_t bytes = 0;
  if (m.layout_ == static_cast<int>(internal::PackedLayoutKind::kRows16)) {
    if (n_rows % 16 != 0) return pm;
    bytes = static_cast<size_t>(n_rows / 16 * m.group_bytes_);
  } else if (m.layout_ == static_cast<int>(internal::PackedLayoutKind::kRows8)) {
    if (n_rows % 8 != 0) return pm;
    bytes = static_cast<size_t>(internal::round_up(n_rows / 8 * m.group_bytes_, 64));
  } else {
    return pm;
  }
  // Groups are stored one after another from the start: the first n_rows / group rows' groups
  // are a prefix of m's bytes (and of what pack_matrix of the first n_rows rows would make).
  pm.data_ = std::unique_ptr<void, PackedMatrix::Free>(m.data_.get(), PackedMatrix::Free{false});
  pm.bytes_ = std::min(bytes, m.bytes_);
  pm.format_ = m.format_;
  pm.group_bytes_ = m.group_bytes_;
  pm.layout_ = m.layout_;
  return pm;
}

namespace {

/// Memory for packed bytes (freed with std::free), 64-byte aligned; a matrix of 2 MiB or more is
/// 2 MiB aligned and asks Linux for transparent huge pages (MADV_HUGEPAGE; advice only): a
/// decode streams every weight once per token, and 4 KiB pages cost it TLB misses. Only whole
/// 2 MiB stretches of the matrix get huge pages; its last partial one stays in 4 KiB pages, so
/// no memory is committed beyond the matrix.
void* alloc_packed(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  constexpr size_t kPage = 4096;
  if (bytes < kHuge) return std::aligned_alloc(64, bytes);
  const size_t paged = (bytes + kPage - 1) / kPage * kPage;
  // posix_memalign, not aligned_alloc: the size need not be a multiple of the alignment (the
  // sanitizers enforce that rule for aligned_alloc).
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, paged) != 0) return nullptr;
#if defined(__linux__)
  (void)madvise(p, paged, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace

PackedMatrix pack_matrix(const WeightMatrix& w, ThreadPool* pool) {
  CHECK(matmul_supports(w.type)) << "pack_matrix: unsupported type " << type_name(w.type);
  CHECK(w.n_in > 0 && w.n_in % block_size(w.type) == 0) << "pack_matrix: bad n_in " << w.n_in;
  const size_t bytes = packed_shape(w).bytes;
  if (bytes == 0) return adopt_packed(w, PackedImage{});
  void* data = alloc_packed(bytes);
  CHECK(data != nullptr) << "pack_matrix: out of memory for " << bytes << " bytes";
  PackedMatrix pm = pack_matrix_into(w, data, pool);
  pm.data_.get_deleter().owned = true;
  return pm;
}

PackedMatrix pack_matrix_into(const WeightMatrix& w, void* dst, ThreadPool* pool) {
  CHECK(matmul_supports(w.type)) << "pack_matrix_into: unsupported type " << type_name(w.type);
  CHECK(w.n_in > 0 && w.n_in % block_size(w.type) == 0) << "pack_matrix_into: bad n_in " << w.n_in;
  const PackedImage shape = packed_shape(w);
  if (shape.bytes == 0) return adopt_packed(w, PackedImage{});
  CHECK(dst != nullptr && reinterpret_cast<uintptr_t>(dst) % 64 == 0)
      << "pack_matrix_into: dst not 64-byte aligned";
  PackedMatrix pm =
      adopt_packed(w, PackedImage{dst, shape.bytes, shape.format, shape.layout, shape.group_bytes});
  uint8_t* data = static_cast<uint8_t*>(dst);
  if (shape.layout == static_cast<int>(internal::PackedLayoutKind::kRows16)) {
    const auto format = static_cast<internal::PackedFormat>(shape.format);
    HWY_DYNAMIC_DISPATCH(PackAll)
    (internal::matmul_args(w), shape.format, internal::packed_layout(format, w.n_in), data, pool);
  } else {
    HWY_DYNAMIC_DISPATCH(Pack8All)(internal::matmul_args(w), data, pool);
    // The groups end before the rounded-up size: the tail is zeroed, so that the bytes (and the
    // repack cache's checksums of them) do not depend on what the memory held.
    const size_t used = static_cast<size_t>(internal::ceil_div(w.n_out, 8) * shape.group_bytes);
    std::memset(data + used, 0, shape.bytes - used);
  }
  return pm;
}

PackedMatrix packed_stack(std::span<const PackedMatrix* const> parts) {
  PackedMatrix pm;
  CHECK(!parts.empty()) << "packed_stack: no parts";
  const PackedMatrix& first = *parts[0];
  pm.source_ = WeightMatrix{first.source_.type, nullptr, 0, first.source_.n_in};
  for (const PackedMatrix* p : parts) pm.source_.n_out += p->source_.n_out;
  const int layout = static_cast<int>(internal::packed_layout_kind());
  const int64_t group_rows = layout == static_cast<int>(internal::PackedLayoutKind::kRows16)  ? 16
                             : layout == static_cast<int>(internal::PackedLayoutKind::kRows8) ? 8
                                                                                              : 0;
  if (group_rows == 0) return pm;
  const uint8_t* next = static_cast<const uint8_t*>(first.data_.get());
  size_t bytes = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PackedMatrix& p = *parts[i];
    const bool last = i + 1 == parts.size();
    if (!p.is_packed() || p.layout_ != layout || p.format_ != first.format_ ||
        p.group_bytes_ != first.group_bytes_ || p.source_.type != first.source_.type ||
        p.source_.n_in != first.source_.n_in || p.data_.get() != next ||
        (!last && (p.source_.n_out % group_rows != 0 ||
                   p.bytes_ != size_t(p.source_.n_out / group_rows * p.group_bytes_)))) {
      return pm;
    }
    next += p.bytes_;
    bytes += p.bytes_;
  }
  pm.data_ =
      std::unique_ptr<void, PackedMatrix::Free>(first.data_.get(), PackedMatrix::Free{false});
  pm.bytes_ = bytes;
  pm.format_ = first.format_;
  pm.group_bytes_ = first.group_bytes_;
  pm.layout_ = layout;
  return pm;
}

bool reads_packed(const PackedMatrix& m) {
  return m.is_packed() && static_cast<int>(internal::packed_layout_kind()) == m.layout_;
}

PackedMatrix pack_like(const PackedMatrix& m, const WeightMatrix& w, ThreadPool* pool) {
  if (reads_packed(m)) return pack_matrix(w, pool);
  return adopt_packed(w, PackedImage{});
}

void matmul(const PackedMatrix& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool* pool) {
  const internal::MatmulTimer timer;
  // Packed data is read only by the kernels of the layout it was packed for (the dispatch
  // target can change after packing: MNEMO_SIMD, tests); otherwise the source is used.
  if (!reads_packed(w)) {
    CHECK(w.source_.data != nullptr || w.source_.n_out == 0)
        << "matmul: a stacked matrix (packed_stack) read under a target it was not packed for";
    return matmul(w.source_, x, x_stride, n_tokens, y, y_stride, pool);
  }
  const WeightMatrix& s = w.source_;
  CHECK(n_tokens >= 0 && x_stride >= s.n_in && y_stride >= s.n_out)
      << "matmul: bad shape n_out=" << s.n_out << " n_tokens=" << n_tokens;
  if (n_tokens == 0 || s.n_out == 0) return;
  const internal::MatmulArgs a = internal::matmul_args(s, x, x_stride, n_tokens, y, y_stride, pool);
  if (w.layout_ == static_cast<int>(internal::PackedLayoutKind::kRows8)) {
    return HWY_DYNAMIC_DISPATCH(Packed8MatmulOp)(a, static_cast<const uint8_t*>(w.data_.get()));
  }
  const auto format = static_cast<internal::PackedFormat>(w.format_);
  HWY_DYNAMIC_DISPATCH(PackedMatmulOp)
  (a, w.format_, internal::packed_layout(format, s.n_in),
   static_cast<const uint8_t*>(w.data_.get()));
}

void matmul(const PackedMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  matmul(w, x, w.source().n_in, n_tokens, y, w.source().n_out, pool);
}

}  // namespace mnemo::kernels
#endif  // HWY_ONCE
