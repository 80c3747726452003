// reference/rwkv6.h — float64 reference for rwkv6: the per-key-decay recurrence with a bonus on
// the current token, forward and backward.
//
//   o_t = scale · [ S_{t-1}ᵀ q_t + (Σ_d q_td u_d k_td) v_t ]
//   S_t = diag(exp(w_t)) · S_{t-1} + k_t v_tᵀ                          (S_{-1} = h0)
// with w_t ∈ R^K a log decay per key dimension and u ∈ R^{H×K} a per-head bonus. q is FLA's r
// (receptance). The output reads the state before the step, unlike the other families. Every
// tensor is float64 and head_last ([B, T, H, D]); a tensor of any other dtype is a harness bug
// and throws InternalError (reference/README.md, rule 1). Shares no code with kernels/.
//
//   Rwkv6Inputs in{q, k, v, w, u};     // fp64
//   Rwkv6Outputs out = rwkv6_fwd(in);
//   Rwkv6Grads grads = rwkv6_bwd(in, d_o, dht);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct Rwkv6Inputs {
    at::Tensor q;                     // [B, T, H, K] fp64 (FLA's r)
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor w;                     // [B, T, H, K] fp64 log decay per key dimension
    at::Tensor u;                     // [H, K] fp64 bonus of the current token
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    int64_t state_stride = 0;         // > 0: the forward also returns states (below)
};

struct Rwkv6Outputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct Rwkv6Grads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor dw;          // [B, T, H, K]
    at::Tensor du;          // [H, K], summed over every sequence
    at::Tensor dh0;         // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
Rwkv6Outputs rwkv6_fwd(const Rwkv6Inputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·V·√L) per sequence.
Rwkv6Grads rwkv6_bwd(const Rwkv6Inputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating rwkv6_fwd: the quadratic (parallel) form
/// o_t = scale · [ Σ_{s<t} (Σ_d q_td k_sd exp(Gx_td − G_sd)) v_s + (q_t·(u ⊙ k_t)) v_t
///                 + (q_t ⊙ exp(Gx_t))ᵀ h0 ]
/// with G the inclusive and Gx = G − w the exclusive cumsum of w along the sequence.
Rwkv6Outputs rwkv6_fwd_parallel(const Rwkv6Inputs& in);

}  // namespace lav::ref
