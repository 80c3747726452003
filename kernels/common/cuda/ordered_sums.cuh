// kernels/common/cuda/ordered_sums.cuh — sums over a block's warps and over per-block slices
// of scratch, always in the same order, so that backward kernels give the same bits every run
// (fp32 atomics would add in arrival order).
#pragma once

#include <cstdint>

namespace lav::cuda {

/// Σ_i x[i][j], i = 0 … Warps − 1 in order: one step's per-warp partials of element j.
template <int Warps, int N>
__device__ __forceinline__ float warps_sum(const float (&x)[Warps][N], int j) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < Warps; ++i) s += x[i][j];
    return s;
}

/// Σ_i at[i · stride], i = 0 … slices − 1 in order: an element summed over the blocks that
/// each wrote their own slice.
__device__ __forceinline__ float slice_sum(const float* at, int64_t stride, int slices) {
    float s = 0.f;
    for (int i = 0; i < slices; ++i) s += at[i * stride];
    return s;
}

}  // namespace lav::cuda
