// kernels/common/cuda/delta_recurrent_cuda.h — CUDA launchers of the recurrent delta rule shared
// by delta_rule, gated_delta_rule and kda.
//
// Per value head hv, reading q, k of key head hv / (HV / H), with a_t the decay (1, a scalar
// exp(g_t), or exp(g_t) per key):
//   S̄ = diag(a_t) S_{t-1},  u_t = β_t (v_t − S̄ᵀ k_t),  S_t = S̄ + k_t u_tᵀ,  o_t = S_tᵀ (scale q_t)
// The three families differ only in the gate (DeltaGate), so one set of kernels serves them.
// States are [N, HV, K, V] row-major in the state dtype.
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/cuda_tensor.h"

namespace lav::cuda {

enum class DeltaGate : int {
    none,      ///< delta_rule
    per_head,  ///< g [B, T, HV] (gated_delta_rule)
    per_key,   ///< g [B, T, HV, K] (kda)
};

struct DeltaProblem {
    Strided q, k;  ///< [.., H, K]
    Strided v, o;  ///< [.., HV, V]
    Strided g;     ///< per_head: [B, T, HV] (a per-head view); per_key: [.., HV, K]
    Strided beta;  ///< [B, T, HV] (a per-head view)
    DeltaGate gate = DeltaGate::none;
    /// the in-kernel gate: g is raw, and the log decay is −exp(A_log)·softplus(g + dt_bias),
    /// or, with lower_bound_form, lower_bound·sigmoid(exp(A_log)·(g + dt_bias)) (kda)
    bool gate_in_kernel = false;
    bool lower_bound_form = false;
    float lower_bound = 0.f;
    const float* A_log = nullptr;    ///< [HV] fp32; with gate_in_kernel
    const float* dt_bias = nullptr;  ///< [HV] (per_head) or [HV, K] (per_key) fp32; nullptr: 0
    bool l2norm = false;             ///< q, k ← x / sqrt(Σ x² + 1e-6), in fp32, never rounded
    bool beta_sigmoid = false;       ///< β ← beta_scale · sigmoid(β)
    float beta_scale = 1.f;          ///< 2 with allow_neg_eigval
    const void* h0 = nullptr;        ///< [N, HV, K, V] in the state dtype; nullptr: zeros
    void* ht = nullptr;              ///< [N, HV, K, V] in the state dtype
    DType state = DType::f32;
    Sequences seqs;
    int heads = 0, value_heads = 0;  ///< H and HV, a multiple of H
    int dk = 0, dv = 0;              ///< K and V
    float scale = 1.f;
    /// the backward's checkpoint interval: the state before every `segment`-th step is kept;
    /// delta_recurrent_segment(longest sequence)
    int segment = 1;
};

struct DeltaGrads {
    Strided d_o;                ///< like o
    Strided dq, dk, dv;         ///< like q, k, v; w.r.t. the raw q, k
    Strided dg, dbeta;          ///< like g and beta; w.r.t. the raw gate and β (dg: with a gate)
    const void* dht = nullptr;  ///< state dtype; nullptr: zeros
    void* dh0 = nullptr;        ///< state dtype; nullptr: not wanted
    /// delta_recurrent_workspace_floats(p) fp32 elements, any content. With the in-kernel gate
    /// it holds, on return, each step's share of dA_log and ddt_bias (delta_recurrent_terms()).
    float* workspace = nullptr;
};

/// Where the in-kernel gate's per-step gradient terms lie in the backward's workspace: `rows`
/// rows (B·T, or T packed) of HV terms of dA_log at dA_log, and of HV·width terms of ddt_bias
/// at ddt_bias (width K per_key, else 1). The glue sums them over the rows, in fp32.
struct DeltaGateTerms {
    int64_t rows = 0, width = 1;
    int64_t dA_log = 0, ddt_bias = 0;  ///< offsets in fp32 elements
};

DeltaGateTerms delta_recurrent_terms(const DeltaProblem& p);

/// Largest key width the kernels take.
constexpr int kMaxDeltaKeys = 256;

/// The checkpoint interval for sequences of at most `longest` steps: ⌈√longest⌉ (at least 1).
int delta_recurrent_segment(int64_t longest);

/// Scratch of the backward in fp32 elements: the checkpointed and recomputed states of every
/// (sequence, value head), and the fp32 sums of the gradients across value tiles.
int64_t delta_recurrent_workspace_floats(const DeltaProblem& p);

void delta_recurrent_fwd(const DeltaProblem& p, cudaStream_t stream);
void delta_recurrent_bwd(const DeltaProblem& p, const DeltaGrads& d, cudaStream_t stream);

}  // namespace lav::cuda
