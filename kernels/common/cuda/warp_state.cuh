// kernels/common/cuda/warp_state.cuh — a warp's columns of a [K, V] recurrent state held in fp32
// registers, read from and written to memory in the state dtype.
#pragma once

#include <cstdint>

#include "common/cuda/cuda_tensor.cuh"

namespace lav::cuda {

// Lane l holds keys l + 32·j (j < KPL) of columns [w.col0, w.col0 + Cols) of the state at
// element offset w.state; p gives the sizes (dk, dv) and the state dtype (p.state).

/// S from `src` in `dtype`; zeros where `src` is null or outside [dk, dv).
template <int KPL, int Cols, typename Problem, typename Tile>
__device__ __forceinline__ void load_state(float (&S)[KPL][Cols], const void* src, DType dtype,
                                           const Problem& p, const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
            const int key = lane + 32 * j, col = w.col0 + c;
            S[j][c] = src != nullptr && key < p.dk && col < p.dv
                          ? load(src, dtype, w.state + int64_t(key) * p.dv + col)
                          : 0.f;
        }
}

/// S to `dst` in the state dtype, within [dk, dv).
template <int KPL, int Cols, typename Problem, typename Tile>
__device__ __forceinline__ void store_state(const float (&S)[KPL][Cols], void* dst,
                                            const Problem& p, const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
            const int key = lane + 32 * j, col = w.col0 + c;
            if (key < p.dk && col < p.dv)
                store(dst, p.state, w.state + int64_t(key) * p.dv + col, S[j][c]);
        }
}

}  // namespace lav::cuda
