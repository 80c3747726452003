// kernels/hgrn/hgrn_cuda.h — CUDA launchers of HGRN's elementwise gated recurrence
// h_t = exp(g_t) ⊙ h_{t-1} + x_t, o_t = h_t, over [B, T, H, K] (K channels per head).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/cuda_tensor.h"

namespace lav::cuda {

struct HgrnProblem {
    Strided x, g, o;
    const void* h0 = nullptr;  ///< [N, H, K] in the state dtype; nullptr: zeros
    void* ht = nullptr;
    DType state = DType::f32;
    Sequences seqs;
    int heads = 0, width = 0;  ///< H and K
    int chunk = 64;            ///< chunk variant: steps per chunk, 1..kMaxHgrnChunk
};

/// Largest chunk the chunked scan takes.
constexpr int kMaxHgrnChunk = 64;

struct HgrnGrads {
    Strided d_o, dx, dg;
    const void* dht = nullptr;  ///< state dtype; nullptr: zeros
    void* dh0 = nullptr;        ///< state dtype; nullptr: not wanted
    /// hgrn_workspace_floats() (recurrent) or hgrn_chunk_workspace_floats(p, true) (chunk)
    /// fp32 elements, any content.
    float* workspace = nullptr;
};

int64_t hgrn_workspace_floats(const HgrnProblem& p);

void hgrn_recurrent_fwd(const HgrnProblem& p, cudaStream_t stream);
void hgrn_recurrent_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream);

/// Scratch of the chunked scan in fp32 elements: per chunk and channel, the local scan's end,
/// the gate sum and the entering state (and, for the backward, the reverse scan's carry and
/// the leaving state's gradient).
int64_t hgrn_chunk_workspace_floats(const HgrnProblem& p, bool backward);

/// The chunked scan; `workspace` holds hgrn_chunk_workspace_floats(p, false) elements.
void hgrn_chunk_fwd(const HgrnProblem& p, float* workspace, cudaStream_t stream);
void hgrn_chunk_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream);

}  // namespace lav::cuda
