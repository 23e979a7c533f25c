// Scalar twins of the state-space kernels in mnemo/ssm_kernels.h: the formulas of that header
// written as plain loops with double-precision state and accumulators, one token at a time.
// They define what the kernels compute; ssm_test compares the two. Single-threaded and slow on
// purpose; not for production paths. Arguments as in mnemo/ssm_kernels.h.
#pragma once

#include <cstdint>

#include "kernels/ssm_kernels.h"

namespace mnemo::kernels::ref {

void ssm_conv1d(const SsmConvParams& p, float* conv_state, const float* x, int64_t x_stride,
                const float* w, const float* b, float* y, int64_t y_stride);

/// The state is carried in double between tokens and rounded to float once at the end.
void ssm_scan(const SsmScanParams& p, float* state, const float* x, int64_t x_stride,
              const float* dt, int64_t dt_stride, const float* dt_bias, const float* A,
              const float* B, int64_t b_stride, const float* C, int64_t c_stride, const float* D,
              float* y, int64_t y_stride);

void rms_norm_gated(const float* y, int64_t y_stride, const float* z, int64_t z_stride,
                    const float* w, float eps, int64_t n_tokens, int64_t n, int64_t n_group,
                    float* out, int64_t out_stride);

/// The state is carried in double between tokens and rounded to float once at the end.
void gated_delta_net(const DeltaNetParams& p, float* state, const float* q, const float* k,
                     int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                     const float* beta, int64_t gb_stride, float* out, int64_t out_stride);

void l2_norm_rows(float* x, int64_t n_rows, int64_t n, int64_t stride, float eps);

}  // namespace mnemo::kernels::ref
