// kernels/common/cuda/delta_chunk_cuda.h — CUDA launcher of the delta rule's chunk (WY) forward
// for delta_rule and gated_delta_rule (no gate or one per head; kda's per-key gate is not taken).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/delta_recurrent_cuda.h"

namespace lav::cuda {

/// Largest key width and chunk the chunk forward takes (its tiles live in shared memory).
constexpr int kMaxDeltaChunkKeys = 128;
constexpr int kMaxDeltaChunk = 64;

struct DeltaChunkProblem : DeltaProblem {
    int chunk = 64;  ///< steps per chunk, 1..kMaxDeltaChunk
    /// [NT, HV, K, V] in the state dtype: the state entering each chunk as the passes read it,
    /// chunk c of sequence n at first_chunk[n] + c (device memory, N entries); nullptr: not kept
    void* h = nullptr;
    const int64_t* first_chunk = nullptr;
};

/// The chunk forward: o, ht and (when asked) h, keeping the chunk contract of
/// common/cpu/delta_chunk.h item by item.
void delta_chunk_fwd(const DeltaChunkProblem& p, cudaStream_t stream);

}  // namespace lav::cuda
