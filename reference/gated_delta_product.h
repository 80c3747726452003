// reference/gated_delta_product.h — float64 gated DeltaProduct: recurrence, backward, WY form.
//
// Per head, every token t applies one decay and then n = num_householder delta-rule sub-steps
// (generalised Householder products), and reads the state after the last one:
//   S ← exp(g_t) S
//   for j = 0 .. n−1:  S ← S + β_{t,j} k_{t,j} (v_{t,j} − Sᵀ k_{t,j})ᵀ
//   o_t = scale · Sᵀ q_t                                      (S before the first token = h0)
// q and g are per token ([B, T, H, ·]); k, v and β are per sub-step, interleaved along time as
// FLA lays them out: row t·n + j of the [B, T·n, H, ·] tensors is sub-step j of token t.
// use_qk_l2norm_in_kernel normalises q and every k as x / sqrt(Σ x² + 1e-6). Every tensor is
// float64 and head_last; anything else is a harness bug and throws InternalError
// (reference/README.md, rule 1). Shares no code with kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr double kGatedDeltaProductL2NormEps = 1e-6;

struct GatedDeltaProductInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T·n, H, K] fp64, sub-steps interleaved
    at::Tensor v;                     // [B, T·n, H, V] fp64
    at::Tensor g;                     // [B, T, H] fp64 log decay; undefined: no decay
    at::Tensor beta;                  // [B, T·n, H] fp64
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1] token offsets; empty: dense batch (N = B)
    int64_t num_householder = 1;      // n ≥ 1
    double scale = 0.0;               // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    int64_t state_stride = 0;  // > 0: the forward also returns states (below), in sub-steps
};

struct GatedDeltaProductOutputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before sub-steps 0, state_stride, 2·state_stride, ... of
    /// each sequence's L·n sub-steps (sub-step t·n + j is sub-step j of token t; the state before
    /// sub-step t·n is the one before token t's decay), sequence after sequence (the chunk
    /// boundaries of the interleaved sequence); with state_stride > 0 only
    at::Tensor states;
};

/// Gradients w.r.t. the inputs as passed (raw q, k with the in-kernel norm).
struct GatedDeltaProductGrads {
    at::Tensor dq;      // [B, T, H, K]
    at::Tensor dk, dv;  // [B, T·n, H, ·]
    at::Tensor dg;      // [B, T, H]; undefined without g
    at::Tensor dbeta;   // [B, T·n, H]
    at::Tensor dh0;     // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
GatedDeltaProductOutputs gated_delta_product_fwd(const GatedDeltaProductInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ tokens: memory O(H·K·V·n·√L) per
/// sequence.
GatedDeltaProductGrads gated_delta_product_bwd(const GatedDeltaProductInputs& in,
                                               const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating gated_delta_product_fwd: the WY (UT) form over each
/// whole sequence of L·n sub-steps. With γ_m the log decay of sub-step m (g_t on the first
/// sub-step of token t, 0 on the others), G its inclusive cumsum, D[m, m'] = exp(G_m − G_m')
/// for m' ≤ m, A = strict_lower(diag(β) (K Kᵀ) ⊙ D) and U = (I + A)⁻¹ diag(β) (V − diag(e^G) K
/// h0) by a triangular solve, token t reads row m_t = t·n + n − 1:
///   o_t = scale·(e^{G_{m_t}} q_tᵀ h0 + Σ_{m ≤ m_t} D[m_t, m] (q_t·k_m) U_m)
///   ht  = e^{G_last} h0 + Kᵀ diag(e^{G_last − G}) U
/// Quadratic in L·n.
GatedDeltaProductOutputs gated_delta_product_fwd_wy(const GatedDeltaProductInputs& in);

}  // namespace lav::ref
