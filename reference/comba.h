// reference/comba.h — float64 Comba: the recurrence, its checkpointed backward, the WY form.
//
// Per sequence and head, with an auxiliary key p and S_{-1} = h0:
//   u_t = β_t (v_t − S_{t-1}ᵀ p_t),   S_t = exp(g_t) S_{t-1} + k_t u_tᵀ,   o_t = scale · S_tᵀ q_t
// i.e. S_t = (exp(g_t) I − β_t k_t p_tᵀ) S_{t-1} + β_t k_t v_tᵀ: the correction reads the state
// before the decay, as FLA's kernels (fla/ops/comba/chunk.py) and naive_chunk_comba do.
// use_qk_l2norm_in_kernel normalises q, k and p: x ← x / sqrt(Σ x² + 1e-6), gradients included.
// Every tensor is float64 and head_last; any other dtype is a harness bug and throws
// InternalError (reference/README.md, rule 1). Shares no code with kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr double kCombaL2NormEps = 1e-6;

struct CombaInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor p;                     // [B, T, H, K] fp64 auxiliary key
    at::Tensor g;                     // [B, T, H] fp64 log decay
    at::Tensor beta;                  // [B, T, H] fp64
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    int64_t state_stride = 0;  // > 0: the forward also returns states (below)
};

struct CombaOutputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

/// Gradients w.r.t. the inputs as passed (raw q, k, p with the in-kernel norm).
struct CombaGrads {
    at::Tensor dq, dk, dv, dp;  // like q, k, v, p
    at::Tensor dg, dbeta;       // like g and beta
    at::Tensor dh0;             // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
CombaOutputs comba_fwd(const CombaInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·V·√L) per sequence.
CombaGrads comba_bwd(const CombaInputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating comba_fwd: the WY (UT) form over each whole sequence.
/// With G the inclusive cumsum of g, Gx = G − g the exclusive one, D[i, j] = exp(G_i − G_j) for
/// j ≤ i and Dx[i, j] = exp(Gx_i − G_j) for j < i, A = diag(β) (P Kᵀ) ⊙ Dx and
/// U = (I + A)⁻¹ diag(β) (V − diag(e^Gx) P h0) by a triangular solve:
///   O = scale·(diag(e^G) Q h0 + ((Q Kᵀ) ⊙ D) U),   ht = e^{G_last} h0 + Kᵀ diag(e^{G_last − G}) U
/// Quadratic in L.
CombaOutputs comba_fwd_wy(const CombaInputs& in);

}  // namespace lav::ref
