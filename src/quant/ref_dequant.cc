// Scalar reference dequantize: one row of blocks -> floats.
//
// Bit-exact with ggml's dequantize_row_* (ggml/src/ggml-quants.c) and therefore with gguf-py's
// gguf.quants.dequantize: every output is computed with the same float32 operations in the same
// order (scale products first, then one multiply and at most one subtract / add). Keep it that
// way: reassociating, or letting the compiler fuse a multiply-add, changes low bits. The build
// has no -ffast-math and C++ (not GNU) mode, so GCC does not contract a*b+c into an FMA.
//
// Layouts: src/quant/blocks.h.
#include <cstring>

#include "mnemo/quant.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"

namespace mnemo::quant_internal {
namespace {

float half(uint16_t h) { return half_to_float(h); }

// Q4_K / Q5_K: the six-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// One Q4_K or Q5_K super-block -> kQK_K floats: in chunk c (64 elements) element l < 32 is
// d * sc_2c * q - dmin * m_2c with q the low nibble of qs[32c + l], element 32 + l the same with
// the high nibble and sub-block 2c + 1. Q5_K's qh (null for Q4_K) adds 16 to q when bit 2c (low
// nibble) or 2c + 1 (high nibble) of qh[l] is set.
void dequantize_k4_block(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs,
                         const uint8_t* qh, float* y) {
  const float d = half(d16);
  const float dmin = half(dmin16);
  const uint8_t* q = qs;
  for (int c = 0; c < 4; ++c, q += 32) {
    uint8_t sc;
    uint8_t m;
    k4_scale_min(2 * c, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    k4_scale_min(2 * c + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));
    const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] & 0x0f) + ((qh != nullptr && (qh[l] & u1)) ? 16 : 0);
      *y++ = d1 * static_cast<float>(v) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] >> 4) + ((qh != nullptr && (qh[l] & u2)) ? 16 : 0);
      *y++ = d2 * static_cast<float>(v) - m2;
    }
  }
}

}  // namespace

void dequantize_row_f32(const void* vx, float* y, int64_t n) {
  std::memcpy(y, vx, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = half_to_float(h);
  }
}

void dequantize_row_bf16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = bf16_to_float(h);
  }
}

void dequantize_row_q4_0(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_0*>(vx);
  for (int64_t i = 0; i < n / kQK4_0; ++i, ++b, y += kQK4_0) {
    const float d = half(b->d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((b->qs[j] & 0x0f) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((b->qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_1*>(vx);
  for (int64_t i = 0; i < n / kQK4_1; ++i, ++b, y += kQK4_1) {
    const float d = half(b->d);
    const float m = half(b->m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(b->qs[j] & 0x0f) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(b->qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q5_0*>(vx);
  for (int64_t i = 0; i < n / kQK5_0; ++i, ++b, y += kQK5_0) {
    const float d = half(b->d);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>(((b->qs[j] & 0x0f) | h0) - 16) * d;
      y[j + kQK5_0 / 2] = static_cast<float>(((b->qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q5_1*>(vx);
  for (int64_t i = 0; i < n / kQK5_1; ++i, ++b, y += kQK5_1) {
    const float d = half(b->d);
    const float m = half(b->m);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>((b->qs[j] & 0x0f) | h0) * d + m;
      y[j + kQK5_1 / 2] = static_cast<float>((b->qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_row_q8_0(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_0*>(vx);
  for (int64_t i = 0; i < n / kQK8_0; ++i, ++b, y += kQK8_0) {
    const float d = half(b->d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b->qs[j]) * d;
  }
}

void dequantize_row_q2_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q2_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b) {
    const float d = half(b->d);
    const float dmin = half(b->dmin);
    const uint8_t* q = b->qs;
    int is = 0;  // sub-block (16 elements) index
    for (int h = 0; h < 2; ++h, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++is) {
          const float dl = d * static_cast<float>(b->scales[is] & 0x0f);
          const float ml = dmin * static_cast<float>(b->scales[is] >> 4);
          const uint8_t* qp = q + 16 * part;
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((qp[l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q3_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b) {
    const float d = half(b->d);
    int8_t scales[16];  // unbiased six-bit scales, -32..31
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? (b->scales[j] & 0x0f) : (b->scales[j - 8] >> 4);
      const int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
    }
    const uint8_t* q = b->qs;
    int is = 0;
    int bit = 0;  // hmask bit for the current 32 elements
    for (int h = 0; h < 2; ++h, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++bit) {
        const uint8_t m = static_cast<uint8_t>(1u << bit);
        for (int part = 0; part < 2; ++part, ++is) {
          const float dl = d * static_cast<float>(scales[is]);
          const uint8_t* qp = q + 16 * part;
          const uint8_t* hp = b->hmask + 16 * part;
          for (int l = 0; l < 16; ++l) {
            const int v = ((qp[l] >> shift) & 3) - ((hp[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequantize_row_q4_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b, y += kQK_K) {
    dequantize_k4_block(b->d, b->dmin, b->scales, b->qs, nullptr, y);
  }
}

void dequantize_row_q5_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q5_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b, y += kQK_K) {
    dequantize_k4_block(b->d, b->dmin, b->scales, b->qs, b->qh, y);
  }
}

void dequantize_row_q6_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q6_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b) {
    const float d = half(b->d);
    const uint8_t* ql = b->ql;
    const uint8_t* qh = b->qh;
    const int8_t* sc = b->scales;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_row_q8_K(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_K*>(vx);
  for (int64_t i = 0; i < n / kQK_K; ++i, ++b, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = b->d * static_cast<float>(b->qs[j]);
  }
}

void dequantize_row_iq4_nl(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_iq4_nl*>(vx);
  for (int64_t i = 0; i < n / kQK4_NL; ++i, ++b, y += kQK4_NL) {
    const float d = half(b->d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[b->qs[j] & 0x0f]);
      y[j + kQK4_NL / 2] = d * static_cast<float>(kIq4nlValues[b->qs[j] >> 4]);
    }
  }
}

}  // namespace mnemo::quant_internal
