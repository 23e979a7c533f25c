// Byte layouts of the GGUF / ggml quantized blocks mnemo computes with.
//
// Source: ggml's ggml-common.h (ggml-org/llama.cpp, ggml/src/ggml-common.h) and the GGUF
// specification (ggml-org/ggml docs/gguf.md). The layouts are facts of the file format; the
// struct and field names follow ggml's (block_q4_0, d, dmin, qs, qh, ...) on purpose, so that a
// kernel written against the format reads the same here as in any other GGUF implementation.
//
// Conventions shared by every block:
//   - little-endian; `uint16_t d` / `dmin` / `m` / `s` fields are IEEE binary16 bit patterns
//     (fp16_to_fp32() in mnemo/quant.h);
//   - a block starts at an address aligned to alignof(block) (2, or 4 for block_q8_K): a row of
//     blocks is a plain array, rows inside a GGUF tensor are row_size() bytes apart and GGUF
//     aligns tensor data to >= 8 bytes, so every row start satisfies this;
//   - "x[i]" below is element i of the block's decoded floats, 0 <= i < block size.
// The static_asserts pin every size to GGML_QUANT_SIZES / ggml's static_asserts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnemo {

inline constexpr int kQK4_0 = 32;       // elements per block_q4_0
inline constexpr int kQK4_1 = 32;       // elements per block_q4_1
inline constexpr int kQK5_0 = 32;       // elements per block_q5_0
inline constexpr int kQK5_1 = 32;       // elements per block_q5_1
inline constexpr int kQK8_0 = 32;       // elements per block_q8_0
inline constexpr int kQK8_1 = 32;       // elements per block_q8_1
inline constexpr int kQK4_NL = 32;      // elements per block_iq4_nl
inline constexpr int kQK_K = 256;       // elements per K-quant super-block (q2_K .. q8_K)
inline constexpr int kKScaleSize = 12;  // bytes of packed 6-bit scales/mins in q4_K / q5_K

// Q4_0, 18 bytes, 4.5 bits/weight. x[i] = d * (q[i] - 8), q in [0, 15].
//   [0, 2)   d       fp16 scale
//   [2, 18)  qs[16]  nibbles: low nibble of qs[j] is q[j], high nibble is q[j + 16]
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes (ggml-common.h)");

// Q4_1, 20 bytes, 5 bits/weight. x[i] = d * q[i] + m, q in [0, 15].
//   [0, 2)   d       fp16 scale
//   [2, 4)   m       fp16 minimum (offset)
//   [4, 20)  qs[16]  nibbles as in block_q4_0
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 is 20 bytes (ggml-common.h)");

// Q5_0, 22 bytes, 5.5 bits/weight. x[i] = d * (q[i] - 16), q in [0, 31].
//   [0, 2)   d       fp16 scale
//   [2, 6)   qh[4]   the fifth bits: bit i of the little-endian uint32 is bit 4 of q[i]
//   [6, 22)  qs[16]  the low four bits, as nibbles in block_q4_0
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes (ggml-common.h)");

// Q5_1, 24 bytes, 6 bits/weight. x[i] = d * q[i] + m, q in [0, 31].
//   [0, 2) d, [2, 4) m (fp16), [4, 8) qh[4], [8, 24) qs[16]; qh / qs as in block_q5_0.
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes (ggml-common.h)");

// Q8_0, 34 bytes, 8.5 bits/weight. x[i] = d * qs[i].
//   [0, 2)   d       fp16 scale
//   [2, 34)  qs[32]  int8 quants
struct block_q8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes (ggml-common.h)");

// Q8_1, 36 bytes (gguf-py's GGML_QUANT_SIZES says 40, a stale value; ggml is authoritative).
// x[i] = d * qs[i]; s = d * sum(qs) is kept for dot products with Q4_1 / Q5_1.
//   [0, 2) d (fp16), [2, 4) s (fp16), [4, 36) qs[32] int8
struct block_q8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 is 36 bytes (ggml-common.h)");

// Q2_K, 84 bytes, 2.625 bits/weight: 16 sub-blocks of 16 elements.
//   [0, 16)   scales[16]  sub-block j: low nibble = scale, high nibble = min (4 bits each)
//   [16, 80)  qs[64]      2-bit quants: for half h (128 elements, 32 bytes qs[32h..32h+32)) and
//                         shift s in {0, 2, 4, 6}, element 128h + 32(s/2) + l is
//                         (qs[32h + l] >> s) & 3, l in [0, 32)
//   [80, 82)  d           fp16 super-block scale of the scales
//   [82, 84)  dmin        fp16 super-block scale of the mins
// x = d * scale_j * q - dmin * min_j, with j = element / 16.
struct block_q2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84, "block_q2_K is 84 bytes (ggml-common.h)");

// Q3_K, 110 bytes, 3.4375 bits/weight: 16 sub-blocks of 16 elements.
//   [0, 32)    hmask[32]  high bit: bit b of hmask[l] belongs to element 32b + l; a CLEAR bit
//                         subtracts 4 from the 2-bit quant (q in [-4, 3])
//   [32, 96)   qs[64]     low 2 bits, laid out as in block_q2_K
//   [96, 108)  scales[12] 16 six-bit scales (biased by 32): scale j has low 4 bits
//                         (j < 8 ? scales[j] & 15 : scales[j - 8] >> 4) and high 2 bits
//                         (scales[8 + j % 4] >> 2 * (j / 4)) & 3
//   [108, 110) d          fp16 super-block scale
// x = d * (scale_j - 32) * q, with j = element / 16.
struct block_q3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(block_q3_K) == 110, "block_q3_K is 110 bytes (ggml-common.h)");

// Q4_K, 144 bytes, 4.5 bits/weight: 8 sub-blocks of 32 elements.
//   [0, 2)    d          fp16 scale of the scales
//   [2, 4)    dmin       fp16 scale of the mins
//   [4, 16)   scales[12] 8 six-bit scales sc_j and 8 six-bit mins m_j:
//                        j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63
//                        j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
//                                m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
//   [16, 144) qs[128]    nibbles: for chunk c (64 elements, bytes qs[32c..32c+32)), element
//                        64c + l is the low nibble of qs[32c + l], 64c + 32 + l the high one
// x = d * sc_j * q - dmin * m_j, with j = element / 32.
struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K is 144 bytes (ggml-common.h)");

// Q5_K, 176 bytes, 5.5 bits/weight: as block_q4_K plus a fifth bit per element.
//   [0, 2) d, [2, 4) dmin, [4, 16) scales[12] (as block_q4_K),
//   [16, 48)  qh[32]   bit b of qh[l] is bit 4 of element 32b + l
//   [48, 176) qs[128]  low nibbles, as block_q4_K
struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K is 176 bytes (ggml-common.h)");

// Q6_K, 210 bytes, 6.5625 bits/weight: 16 sub-blocks of 16 elements, q in [-32, 31].
//   [0, 128)   ql[128]    low 4 bits: for half h (128 elements; ql[64h..64h+64)), l in [0, 32):
//                         element 128h + l      = low nibble of ql[64h + l]
//                         element 128h + 32 + l = low nibble of ql[64h + 32 + l]
//                         element 128h + 64 + l = high nibble of ql[64h + l]
//                         element 128h + 96 + l = high nibble of ql[64h + 32 + l]
//   [128, 192) qh[64]     high 2 bits: bits 2k..2k+1 of qh[32h + l] go to element
//                         128h + 32k + l
//   [192, 208) scales[16] int8 sub-block scales
//   [208, 210) d          fp16 super-block scale
// x = d * scales[j] * (q - 32), with j = element / 16.
struct block_q6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K is 210 bytes (ggml-common.h)");

// Q8_K, 292 bytes: the intermediate type for dot products with K-quants (never in model files).
//   [0, 4)     d          float32 scale (not fp16)
//   [4, 260)   qs[256]    int8 quants, x[i] = d * qs[i]
//   [260, 292) bsums[16]  int16 sums of qs over each group of 16
struct block_q8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(block_q8_K) == 292, "block_q8_K is 292 bytes (ggml-common.h)");

// IQ4_NL, 18 bytes, 4.5 bits/weight, non-linear: x[i] = d * kIq4nlValues[q[i]].
//   [0, 2) d (fp16), [2, 18) qs[16] nibbles as in block_q4_0
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl is 18 bytes (ggml-common.h)");

/// The 16 IQ4_NL levels, ascending (ggml-common.h kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Field offsets the comments above promise.
static_assert(offsetof(block_q2_K, d) == 80 && offsetof(block_q2_K, dmin) == 82);
static_assert(offsetof(block_q3_K, scales) == 96 && offsetof(block_q3_K, d) == 108);
static_assert(offsetof(block_q5_K, qh) == 16 && offsetof(block_q5_K, qs) == 48);
static_assert(offsetof(block_q6_K, scales) == 192 && offsetof(block_q6_K, d) == 208);
static_assert(offsetof(block_q8_K, bsums) == 260);

}  // namespace mnemo
