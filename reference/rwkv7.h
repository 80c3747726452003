// reference/rwkv7.h — float64 reference for rwkv7, the generalized delta rule in its DPLR
// (diagonal plus low rank) and IPLR (identity plus low rank) forms, forward and backward.
//
//   S_t = diag(exp(w_t)) · S_{t-1} + b_t (a_tᵀ S_{t-1}) + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
// in the K×V orientation of FLA's kernels (S_{-1} = h0), i.e. S_t = (D_t + b_t a_tᵀ) S_{t-1} +
// k_t v_tᵀ; a_tᵀ S reads the state before the decay. Without w (IPLR) D_t = I. q is FLA's r.
// Every tensor is float64 and head_last ([B, T, H, D]); a tensor of any other dtype is a
// harness bug and throws InternalError (reference/README.md, rule 1). Shares no code with kernels/.
//
//   Rwkv7Inputs in{q, w, k, v, a, b};     // fp64; w undefined for IPLR
//   Rwkv7Outputs out = rwkv7_fwd(in);
//   Rwkv7Grads grads = rwkv7_bwd(in, d_o, dht);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct Rwkv7Inputs {
    at::Tensor q;                     // [B, T, H, K] fp64 (FLA's r)
    at::Tensor w;                     // [B, T, H, K] fp64 log decay per key dim; undefined: IPLR
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor a;                     // [B, T, H, K] fp64: reads the state, a_tᵀ S_{t-1}
    at::Tensor b;                     // [B, T, H, K] fp64: writes what a read, b_t (a_tᵀ S_{t-1})
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5 (the harness passes rwkv7's 1.0 itself)
    int64_t state_stride = 0;         // > 0: the forward also returns states (below)
};

struct Rwkv7Outputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct Rwkv7Grads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor dw;          // like w; undefined for IPLR
    at::Tensor da, db;      // like a, b
    at::Tensor dh0;         // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
Rwkv7Outputs rwkv7_fwd(const Rwkv7Inputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·V·√L) per sequence.
Rwkv7Grads rwkv7_bwd(const Rwkv7Inputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating rwkv7_fwd: the chunkwise form with chunks of `chunk`
/// rows, where the values each row reads, ha_i = S_{i-1}ᵀ a_i, come from one unit lower
/// triangular solve per chunk (rwkv7.md derives it).
Rwkv7Outputs rwkv7_fwd_chunkwise(const Rwkv7Inputs& in, int64_t chunk);

}  // namespace lav::ref
