// The type traits table (ids, names, block sizes), row-size arithmetic, fp16/bf16 scalar
// converters, and the dispatch of dequantize_row / quantize_row to the scalar references.
//
// Source of the numbers: GGUF spec (ggml-org/ggml docs/gguf.md, "ggml_type") and ggml's
// ggml-common.h / ggml.c type_traits; cross-checked against gguf-py's GGML_QUANT_SIZES.
#include <array>
#include <cstring>
#include <string>

#include "mnemo/check.h"
#include "mnemo/quant.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"

namespace mnemo {
namespace {

using quant_internal::DequantizeFn;
using quant_internal::QuantizeFn;

// One row of the table: the public traits plus the converters behind them.
struct TypeEntry {
  TypeTraits traits;
  DequantizeFn dequantize;  // nullptr: not supported
  QuantizeFn quantize;      // nullptr: not supported
  uint32_t align;           // required alignment of the block data, bytes (alignof(block))
};

constexpr uint32_t kMaxTypeId = 41;  // highest id in GgmlType (Q1_0)

constexpr TypeEntry make(GgmlType t, std::string_view name, uint32_t block_size, uint32_t type_size,
                         DequantizeFn dq = nullptr, QuantizeFn q = nullptr, uint32_t align = 1) {
  return TypeEntry{TypeTraits{t, name, block_size, type_size, dq != nullptr, q != nullptr}, dq, q,
                   align};
}

// Indexed by type id; entries with an empty name are retired / unknown ids.
std::array<TypeEntry, kMaxTypeId + 1> build_table() {
  namespace qi = quant_internal;
  std::array<TypeEntry, kMaxTypeId + 1> t{};
  auto set = [&t](const TypeEntry& e) { t[static_cast<uint32_t>(e.traits.type)] = e; };
  using G = GgmlType;
  set(make(G::F32, "f32", 1, 4, qi::dequantize_row_f32, qi::quantize_row_f32));
  set(make(G::F16, "f16", 1, 2, qi::dequantize_row_f16, qi::quantize_row_f16));
  set(make(G::Q4_0, "q4_0", 32, 18, qi::dequantize_row_q4_0, qi::quantize_row_q4_0,
           alignof(block_q4_0)));
  set(make(G::Q4_1, "q4_1", 32, 20, qi::dequantize_row_q4_1, qi::quantize_row_q4_1,
           alignof(block_q4_1)));
  set(make(G::Q5_0, "q5_0", 32, 22, qi::dequantize_row_q5_0, qi::quantize_row_q5_0,
           alignof(block_q5_0)));
  set(make(G::Q5_1, "q5_1", 32, 24, qi::dequantize_row_q5_1, qi::quantize_row_q5_1,
           alignof(block_q5_1)));
  set(make(G::Q8_0, "q8_0", 32, 34, qi::dequantize_row_q8_0, qi::quantize_row_q8_0,
           alignof(block_q8_0)));
  // Q8_1 is 36 bytes in ggml (fp16 d, fp16 s, 32 x int8). gguf-py's GGML_QUANT_SIZES says 40, a
  // stale value from when d and s were floats; ggml (the source of truth for the format) wins.
  set(make(G::Q8_1, "q8_1", 32, 36));
  set(make(G::Q2_K, "q2_K", 256, 84, qi::dequantize_row_q2_K, nullptr, alignof(block_q2_K)));
  set(make(G::Q3_K, "q3_K", 256, 110, qi::dequantize_row_q3_K, nullptr, alignof(block_q3_K)));
  set(make(G::Q4_K, "q4_K", 256, 144, qi::dequantize_row_q4_K, nullptr, alignof(block_q4_K)));
  set(make(G::Q5_K, "q5_K", 256, 176, qi::dequantize_row_q5_K, nullptr, alignof(block_q5_K)));
  set(make(G::Q6_K, "q6_K", 256, 210, qi::dequantize_row_q6_K, nullptr, alignof(block_q6_K)));
  set(make(G::Q8_K, "q8_K", 256, 292, qi::dequantize_row_q8_K, qi::quantize_row_q8_K,
           alignof(block_q8_K)));
  set(make(G::IQ2_XXS, "iq2_xxs", 256, 66));
  set(make(G::IQ2_XS, "iq2_xs", 256, 74));
  set(make(G::IQ3_XXS, "iq3_xxs", 256, 98));
  set(make(G::IQ1_S, "iq1_s", 256, 50));
  set(make(G::IQ4_NL, "iq4_nl", 32, 18, qi::dequantize_row_iq4_nl, qi::quantize_row_iq4_nl,
           alignof(block_iq4_nl)));
  set(make(G::IQ3_S, "iq3_s", 256, 110));
  set(make(G::IQ2_S, "iq2_s", 256, 82));
  set(make(G::IQ4_XS, "iq4_xs", 256, 136));
  set(make(G::I8, "i8", 1, 1));
  set(make(G::I16, "i16", 1, 2));
  set(make(G::I32, "i32", 1, 4));
  set(make(G::I64, "i64", 1, 8));
  set(make(G::F64, "f64", 1, 8));
  set(make(G::IQ1_M, "iq1_m", 256, 56));
  set(make(G::BF16, "bf16", 1, 2, qi::dequantize_row_bf16, qi::quantize_row_bf16));
  set(make(G::TQ1_0, "tq1_0", 256, 54));
  set(make(G::TQ2_0, "tq2_0", 256, 66));
  set(make(G::MXFP4, "mxfp4", 32, 17));
  set(make(G::NVFP4, "nvfp4", 64, 36));
  set(make(G::Q1_0, "q1_0", 128, 18));
  return t;
}

const std::array<TypeEntry, kMaxTypeId + 1>& table() {
  static const std::array<TypeEntry, kMaxTypeId + 1> kTable = build_table();
  return kTable;
}

// Entry of a known type; CHECK-fails on an id without traits (a GgmlType value cast from an
// unvalidated integer is a bug: outside ids go through type_traits()).
const TypeEntry& entry(GgmlType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  CHECK(id <= kMaxTypeId && !table()[id].traits.name.empty()) << "unknown ggml type id " << id;
  return table()[id];
}

bool known(GgmlType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  return id <= kMaxTypeId && !table()[id].traits.name.empty();
}

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type_id) {
  if (type_id > kMaxTypeId || table()[type_id].traits.name.empty()) return std::nullopt;
  return table()[type_id].traits;
}

const TypeTraits& traits(GgmlType type) { return entry(type).traits; }

std::string_view type_name(GgmlType type) {
  return known(type) ? entry(type).traits.name : std::string_view("unknown");
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const TypeEntry& e : table()) {
    const std::string_view n = e.traits.name;
    if (n.empty() || n.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < n.size() && same; ++i) same = ascii_lower(n[i]) == ascii_lower(name[i]);
    if (same) return e.traits.type;
  }
  return std::nullopt;
}

bool is_kv_cache_type(GgmlType type) {
  for (GgmlType t : kKvCacheTypes) {
    if (t == type) return true;
  }
  return false;
}

std::string_view kv_cache_type_names() {
  static const std::string names = [] {
    std::string s;
    for (GgmlType t : kKvCacheTypes) s += (s.empty() ? "" : ", ") + std::string(type_name(t));
    return s;
  }();
  return names;
}

size_t row_size(GgmlType t, int64_t n) {
  const TypeTraits& tr = traits(t);
  CHECK(n >= 0 && n % tr.block_size == 0) << "row of " << n << " elements of type " << tr.name
                                          << " (block size " << tr.block_size << ")";
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

Status check_row_shape(GgmlType t, int64_t n) {
  if (!known(t)) {
    return Status::invalid_argument("unknown ggml type id " +
                                    std::to_string(static_cast<uint32_t>(t)));
  }
  const TypeTraits& tr = entry(t).traits;
  if (n < 0) {
    return Status::invalid_argument("negative row length " + std::to_string(n) + " for type " +
                                    std::string(tr.name));
  }
  if (n % tr.block_size != 0) {
    return Status::invalid_argument("row length " + std::to_string(n) + " of type " +
                                    std::string(tr.name) + " is not a multiple of its block size " +
                                    std::to_string(tr.block_size));
  }
  return Status();
}

Status dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  MNEMO_RETURN_IF_ERROR(check_row_shape(t, n));
  const TypeEntry& e = entry(t);
  if (e.dequantize == nullptr) {
    return Status::not_supported("type " + std::string(e.traits.name) +
                                 " is not supported for dequantize");
  }
  CHECK(reinterpret_cast<uintptr_t>(src) % e.align == 0)
      << "dequantize_row: " << e.traits.name << " data at " << src << " is not " << e.align
      << "-byte aligned";
  e.dequantize(src, dst, n);
  return Status();
}

Status quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  MNEMO_RETURN_IF_ERROR(check_row_shape(t, n));
  const TypeEntry& e = entry(t);
  if (e.quantize == nullptr) {
    return Status::not_supported("type " + std::string(e.traits.name) +
                                 " is not supported for quantize");
  }
  CHECK(reinterpret_cast<uintptr_t>(dst) % e.align == 0)
      << "quantize_row: " << e.traits.name << " data at " << dst << " is not " << e.align
      << "-byte aligned";
  e.quantize(src, dst, n);
  return Status();
}

// --- fp16 / bf16: the inline versions live in quant/fp16.h --------------------------------------

float fp16_to_fp32(uint16_t h) { return quant_internal::half_to_float(h); }
uint16_t fp32_to_fp16(float f) { return quant_internal::float_to_half(f); }
float bf16_to_fp32(uint16_t h) { return quant_internal::bf16_to_float(h); }
uint16_t fp32_to_bf16(float f) { return quant_internal::float_to_bf16(f); }

}  // namespace mnemo
