// kernels/common/cuda/gated_linear_cuda.h — CUDA launchers shared by simple_gla and gla.
//
// Both families are the gated linear recurrence S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ,
// o_t = scale · S_tᵀ q_t; they differ only in the gate's shape (Gate), so one set of kernels
// serves both. States are [N, H, K, V] row-major in the state dtype.
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/cuda_tensor.h"

namespace lav::cuda {

enum class Gate : int {
    none,      ///< plain linear attention
    per_head,  ///< g [B, T, H] (simple_gla)
    per_key,   ///< g like k (gla)
    constant,  ///< g_gamma [H], fp32 (retention, lightning attention)
};

struct GatedLinearProblem {
    Strided q, k, v, g, o;
    Gate gate = Gate::none;
    const float* g_gamma = nullptr;
    const void* h0 = nullptr;  ///< nullptr: zeros
    void* ht = nullptr;
    DType state = DType::f32;
    Sequences seqs;
    int heads = 0, dk = 0, dv = 0;
    float scale = 1.f;
    int chunk = 64;
};

struct GatedLinearGrads {
    Strided d_o, dq, dk, dv, dg;  ///< dg unused without a per-step gate
    const void* dht = nullptr;    ///< state dtype; nullptr: zeros
    void* dh0 = nullptr;          ///< state dtype; nullptr: not wanted
    /// fp32 scratch of gated_linear_workspace_floats() elements (recurrent) or
    /// gated_linear_chunk_workspace_floats(p, true) (chunk), any content.
    float* workspace = nullptr;
};

/// Largest key width the kernels take.
constexpr int kMaxGatedLinearKeys = 256;

int64_t gated_linear_workspace_floats(const GatedLinearProblem& p);

/// Scratch of the chunk variant, in fp32 elements: the state entering every chunk (and, for
/// the backward, the gradient of the state leaving it), in the state dtype.
int64_t gated_linear_chunk_workspace_floats(const GatedLinearProblem& p, bool backward);

void gated_linear_recurrent_fwd(const GatedLinearProblem& p, cudaStream_t stream);
void gated_linear_recurrent_bwd(const GatedLinearProblem& p, const GatedLinearGrads& d,
                                cudaStream_t stream);

/// The chunk variant, p.chunk steps per chunk (1..64); `workspace` holds
/// gated_linear_chunk_workspace_floats(p, false) elements, d.workspace (p, true).
void gated_linear_chunk_fwd(const GatedLinearProblem& p, float* workspace, cudaStream_t stream);
void gated_linear_chunk_bwd(const GatedLinearProblem& p, const GatedLinearGrads& d,
                            cudaStream_t stream);

}  // namespace lav::cuda
