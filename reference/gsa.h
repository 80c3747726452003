// reference/gsa.h — float64 reference for gsa (Gated Slot Attention): two chained gated passes
// with a softmax over the slots between them, forward and backward.
//
// Per sequence and head, with M memory slots, slot scores s_t ∈ R^M and a log forget gate
// g_t ∈ R^M shared by both states (Hk_{-1} = hk0, Hv_{-1} = hv0, zeros when undefined):
//   Hk_t = Hk_{t-1} · diag(exp(g_t)) + k_t s_tᵀ        Hk ∈ R^{K×M}
//   ok_t = scale · Hk_tᵀ q_t,   p_t = softmax(ok_t)     (over the M slots)
//   Hv_t = diag(exp(g_t)) · Hv_{t-1} + s_t v_tᵀ        Hv ∈ R^{M×V}
//   o_t  = Hv_tᵀ p_t
// Every tensor is float64 and head_last ([B, T, H, D]); the harness widens the quantised kernel
// inputs and permutes layouts before calling. Shares no code with kernels/. A tensor of any
// other dtype is a harness bug: it throws InternalError (reference/README.md, rule 1).
//
//   GsaInputs in{q, k, v, s, g};     // fp64
//   GsaOutputs out = gsa_fwd(in);
//   GsaGrads grads = gsa_bwd(in, d_o, dhkt, dhvt);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct GsaInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor s;                     // [B, T, H, M] fp64 slot scores
    at::Tensor g;                     // [B, T, H, M] fp64 log forget gate per slot
    at::Tensor hk0;                   // [N, H, K, M] fp64; undefined: zeros
    at::Tensor hv0;                   // [N, H, M, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
};

struct GsaOutputs {
    at::Tensor o;    // [B, T, H, V] fp64
    at::Tensor hkt;  // [N, H, K, M] fp64
    at::Tensor hvt;  // [N, H, M, V] fp64
};

struct GsaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor ds, dg;      // [B, T, H, M]
    at::Tensor dhk0;        // [N, H, K, M]; undefined without hk0
    at::Tensor dhv0;        // [N, H, M, V]; undefined without hv0
};

/// The step-by-step recurrence.
GsaOutputs gsa_fwd(const GsaInputs& in);

/// Gradients of L = Σ o·d_o + Σ hkt·dhkt + Σ hvt·dhvt (an undefined cotangent is zeros) by one
/// reverse-time sweep that recomputes both states from checkpoints every ⌈√L⌉ steps: memory
/// O(H·(K + V)·M·√L) per sequence.
GsaGrads gsa_bwd(const GsaInputs& in, const at::Tensor& d_o, const at::Tensor& dhkt,
                 const at::Tensor& dhvt);

/// An independent form for validating gsa_fwd: both passes in their quadratic (parallel) form
/// with G the inclusive cumsum of g along the sequence,
///   ok_t = scale · [ Σ_{j≤t} (q_t·k_j) s_j ⊙ exp(G_t − G_j) + (Hk0ᵀ q_t) ⊙ exp(G_t) ]
///   o_t  = Σ_{j≤t} (Σ_m p_tm s_jm exp(G_tm − G_jm)) v_j + Hv0ᵀ (p_t ⊙ exp(G_t))
/// and the final states in closed form. Quadratic in the sequence length.
GsaOutputs gsa_fwd_parallel(const GsaInputs& in);

}  // namespace lav::ref
