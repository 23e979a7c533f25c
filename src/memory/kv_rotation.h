// Hadamard rotation of stored K/V rows, and conversion of one row between storage formats.
//
// Why: quantized K/V (q4_0, q5_1, ...) lose most where a few channels carry outliers; an
// orthonormal rotation of each head spreads them over all channels before quantization and
// leaves attention unchanged, because both sides of every dot product are rotated:
//   score = q.k = (Hq).(Hk)         for orthonormal H, per head
//   out   = sum_i p_i v_i = H^T (sum_i p_i (H v_i))
// This is the idea of QuaRot (Ashkboos et al. 2024, "QuaRot: Outlier-Free 4-Bit Inference in
// Rotated LLMs", arXiv:2404.00456), applied to the KV cache only (weights are not rotated).
//
// The rotation: H_d is the Walsh-Hadamard matrix of order d in Sylvester's ordering (H_1 = [1],
// H_2d = [[H_d, H_d], [H_d, -H_d]]) scaled by 1/sqrt(d), so H_d is symmetric and orthonormal and
// therefore its own inverse: rotating twice gives the input back (up to float rounding). No
// random signs are used (nothing to store or seed). d is the attention head size and must be a
// power of two; a row of n elements is rotated as n / d independent heads.
//
// "Rotation" of a stream is a property of its stored rows (KvStorage::StreamTypes::rotation):
// 0 = rows hold K and V as computed, d = every head of d elements is stored as H_d x. The model
// rotates Q (and un-rotates the attention output) for rotated streams; conversions between
// types and rotations go through float (kv_row_convert).
#pragma once

#include <cstdint>

#include "mnemo/quant.h"
#include "mnemo/status.h"

namespace mnemo {

/// True for a usable rotation size: 0 (none) or a power of two in [2, 4096].
bool is_valid_kv_rotation(uint32_t d);

/// True for the quantized KV cache types (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl): the ones whose
/// rows are rotated by default; f32, f16 and bf16 are not.
bool is_quantized_kv_type(GgmlType t);

/// The rotation a stream of these types gets when the cache's rotation size is `dim` (0 = the
/// rotation option is off): dim when K or V is quantized, else 0.
uint32_t kv_rotation_for(uint32_t dim, GgmlType k_type, GgmlType v_type);

/// x <- H_d x for each of the n / d consecutive blocks of x (in place, O(n log d)).
/// Preconditions (CHECKed): d is a power of two >= 2 and divides n. Thread-safe.
void hadamard_rotate(float* x, int64_t n, uint32_t d);

/// Converts one row of n elements stored as (src_type, src_rot) into (dst_type, dst_rot):
/// a byte copy when both match, else dequantize -> un-rotate by H_src_rot (if src_rot) ->
/// rotate by H_dst_rot (if dst_rot) -> quantize. scratch: [n] floats. Errors: as dequantize_row /
/// quantize_row (NotSupported type, bad width). Misaligned rows are handled (bounced through an
/// aligned copy).
Status kv_row_convert(GgmlType src_type, uint32_t src_rot, const void* src, GgmlType dst_type,
                      uint32_t dst_rot, void* dst, int64_t n, float* scratch);

}  // namespace mnemo
