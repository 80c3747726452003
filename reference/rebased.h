// reference/rebased.h — float64 ReBased: causal linear attention with the squared-score kernel.
//
// Per sequence and head, with x_ts = scale·q_t·k_s over s ≤ t (scale = K^-0.5 with use_scale,
// else 1):
//   o_t = Σ_s x_ts² v_s / (Σ_s x_ts² + eps)     (eps = 1e-5; without use_normalize, the sum)
// as FLA's parallel_rebased (fla/ops/rebased/parallel.py). No recurrent state, as in FLA.
// Every tensor is float64 and head_last (reference/README.md, rule 1). Shares no code with
// kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// parallel_rebased's default eps.
constexpr double kRebasedNormEps = 1e-5;

struct RebasedInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch
    bool use_scale = true;
    bool use_normalize = true;
    double eps = kRebasedNormEps;
};

struct RebasedGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
};

/// o [B, T, H, V] by the quadratic (parallel) form, query rows in blocks of 256.
at::Tensor rebased_fwd(const RebasedInputs& in);

/// Gradients of L = Σ o·d_o through the quadratic form; memory O(H·256·L) per sequence.
RebasedGrads rebased_bwd(const RebasedInputs& in, const at::Tensor& d_o);

/// The independent form: the feature-map recurrence with φ(x) = vec(x xᵀ) (K² features).
at::Tensor rebased_fwd_recurrent(const RebasedInputs& in);

}  // namespace lav::ref
