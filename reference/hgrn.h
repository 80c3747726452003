// reference/hgrn.h — float64 reference for hgrn: the elementwise gated recurrence, forward and
// backward.
//
//   h_t = exp(g_t) ⊙ h_{t-1} + x_t,   o_t = h_t     (h_{-1} = h0)
// HGRN's width D is split into H heads of K channels: x, g and o are [B, T, H, K], states
// [N, H, K]; the heads are independent and the split changes nothing in the math. Every tensor
// is float64 and head_last; the harness widens the quantised kernel inputs to fp64 and
// permutes layouts before calling. Shares no code with kernels/. A tensor of any other dtype is
// a harness bug: it throws InternalError (reference/README.md, rule 1).
//
//   HgrnInputs in{x, g};            // fp64, [B, T, H, K]
//   HgrnOutputs out = hgrn_fwd(in);
//   HgrnGrads grads = hgrn_bwd(in, d_o, dht);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

struct HgrnInputs {
    at::Tensor x;                     // [B, T, H, K] fp64
    at::Tensor g;                     // [B, T, H, K] fp64 log decay
    at::Tensor h0;                    // [N, H, K] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
};

struct HgrnOutputs {
    at::Tensor o;   // [B, T, H, K] fp64
    at::Tensor ht;  // [N, H, K] fp64
};

struct HgrnGrads {
    at::Tensor dx;   // [B, T, H, K]
    at::Tensor dg;   // [B, T, H, K]
    at::Tensor dh0;  // [N, H, K]; undefined without h0
};

/// The step-by-step recurrence.
HgrnOutputs hgrn_fwd(const HgrnInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·√L) per sequence.
HgrnGrads hgrn_bwd(const HgrnInputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating hgrn_fwd: the closed (parallel) form
/// h_t = exp(G_t) ⊙ h0 + Σ_{s≤t} exp(G_t − G_s) ⊙ x_s with G the inclusive cumsum of g along
/// the sequence. Quadratic in the sequence length.
HgrnOutputs hgrn_fwd_parallel(const HgrnInputs& in);

}  // namespace lav::ref
