// reference/simple_gla.h — float64 reference for simple_gla: the recurrence, forward and backward.
//
//   S_t = exp(g_t) · S_{t-1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t     (S_{-1} = h0)
// Every tensor is float64 and head_last ([B, T, H, D]); the harness widens the quantised
// kernel inputs to fp64 and permutes layouts before calling. Shares no code with kernels/.
// g_t is g[b, t, h], or g_gamma[h], or their sum when both are given, or 0 without either.
// A tensor of any other dtype is a harness bug: it throws InternalError
// (reference/README.md, rule 1).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct SimpleGlaInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor g;                     // [B, T, H] fp64 log decay; undefined: none
    at::Tensor g_gamma;               // [H] fp64 constant log decay; undefined: none
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    int64_t state_stride = 0;         // > 0: the forward also returns states (below)
};

struct SimpleGlaOutputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct SimpleGlaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor dg;          // [B, T, H]; undefined without g
    at::Tensor dh0;         // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
SimpleGlaOutputs simple_gla_fwd(const SimpleGlaInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht by a reverse-time recurrence that recomputes states
/// from checkpoints every ~√T steps: memory O(H·K·V·√T) per sequence, not O(T).
SimpleGlaGrads simple_gla_bwd(const SimpleGlaInputs& in, const at::Tensor& d_o,
                              const at::Tensor& dht);

/// An independent form for validating simple_gla_fwd: the quadratic (parallel) form
/// O = scale·((Q Kᵀ) ⊙ D) V + scale·exp(G) Q h0 with D[t, s] = exp(G_t − G_s), s ≤ t.
SimpleGlaOutputs simple_gla_fwd_parallel(const SimpleGlaInputs& in);

}  // namespace lav::ref
