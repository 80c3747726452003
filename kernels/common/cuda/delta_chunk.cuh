// kernels/common/cuda/delta_chunk.cuh — what the chunk kernels of the delta rules
// (delta_chunk*.cu) and of kda (kda_chunk*.cu) share: their block size and launch, the rows of
// q̂ and k̂ as they read them, and the last pass of their backward.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_cuda.h"

namespace lav::cuda {

/// Threads per block of every chunk kernel.
constexpr int kDeltaChunkThreads = 256;

/// Sets the dynamic shared memory `kernel` may take (`floats` fp32 elements), and launches it
/// with kDeltaChunkThreads threads a block.
template <typename... Params, typename... Args>
void launch_chunk_kernel(void (*kernel)(Params...), dim3 grid, int64_t floats, cudaStream_t stream,
                         const Args&... args) {
    const int bytes = int(floats * sizeof(float));
    LAV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                   "a delta rule chunk kernel");
    kernel<<<grid, kDeltaChunkThreads, bytes, stream>>>(args...);
}

/// Row t of key head h of q or k as the chunk kernels read it, by one warp: x / √(Σ x² + eps)
/// rounded to the input dtype with the in-kernel l2norm, x itself without. Written to `tile`
/// (elements 0..K) where not nullptr, and to `kept` (in `kept_dtype`, from element `kept_at`)
/// where not nullptr.
__device__ inline void unit_row(const DeltaChunkProblem& p, const Strided& src, const Span& s,
                                int64_t t, int h, float* tile, void* kept, DType kept_dtype,
                                int64_t kept_at) {
    const int lane = threadIdx.x % 32, K = p.dk;
    const int64_t off = at(src, s, t, h);
    float rstd = 1.f;
    if (p.l2norm) {
        float ss = 0.f;
        for (int d = lane; d < K; d += 32) {
            const float xd = load(src.data, src.dtype, off + d);
            ss += xd * xd;
        }
        rstd = 1.f / sqrtf(warp_sum(ss) + kL2NormEps);
    }
    for (int d = lane; d < K; d += 32) {
        const float xd = load(src.data, src.dtype, off + d);
        const float y = p.l2norm ? rounded(xd * rstd, p.q.dtype) : xd;
        if (tile != nullptr) tile[d] = y;
        if (kept != nullptr) store(kept, kept_dtype, kept_at + d, y);
    }
}

/// The backward's last pass: dq and dk from the per-value-head gradients `dq`, `dk` ([rows, HV,
/// K] fp32), summed over each key head's value heads in order, then back through the l2norm,
/// dx = (dx̂ − (dx̂·y) y) rstd, rounded once. y is q̂, k̂ as the forward stored them (`qn`, `kn`
/// in the input dtype, the delta rules' contract) or, where those are nullptr, the fp32 unit
/// vector x rstd (kda's).
void finish_chunk_keys(const DeltaChunkProblem& p, const DeltaGrads& d, const float* dq,
                       const float* dk, const void* qn, const void* kn, cudaStream_t stream);

}  // namespace lav::cuda
