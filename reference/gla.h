// reference/gla.h — float64 reference for gla: the per-key-decay recurrence, forward and backward.
//
//   S_t = diag(exp(g_t)) · S_{t-1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t     (S_{-1} = h0)
// with g_t ∈ R^K a log decay per key dimension (GLA; HGRN2 is the same op). Every tensor is
// float64 and head_last ([B, T, H, D]); the harness widens the quantised kernel inputs to fp64
// and permutes layouts before calling. Shares no code with kernels/. A tensor of any other
// dtype is a harness bug: it throws InternalError (reference/README.md, rule 1).
//
//   GlaInputs in{q, k, v, g};        // fp64, [B, T, H, K] / [B, T, H, V]
//   GlaOutputs out = gla_fwd(in);
//   GlaGrads grads = gla_bwd(in, d_o, dht);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct GlaInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor g;                     // [B, T, H, K] fp64 log decay per key dimension
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    int64_t state_stride = 0;         // > 0: the forward also returns states (below)
};

struct GlaOutputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct GlaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor dg;          // [B, T, H, K]
    at::Tensor dh0;         // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
GlaOutputs gla_fwd(const GlaInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·V·√L) per sequence.
GlaGrads gla_bwd(const GlaInputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating gla_fwd: the quadratic (parallel) form
/// o_t = scale · [ Σ_{s≤t} (Σ_d q_td k_sd exp(G_td − G_sd)) v_s + (q_t ⊙ exp(G_t))ᵀ h0 ]
/// with G the inclusive cumsum of g along the sequence. Quadratic in the sequence length.
GlaOutputs gla_fwd_parallel(const GlaInputs& in);

}  // namespace lav::ref
