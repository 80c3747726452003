// reference/based.h — float64 Based: causal linear attention with the 2nd-order Taylor feature map.
//
// Per sequence and head, with x_ts = scale·q_t·k_s over s ≤ t:
//   o_t = Σ_s (1 + x_ts + x_ts²/2) v_s / (Σ_s (1 + x_ts + x_ts²/2) + 1e-6)
// (without use_norm, just the numerator), as FLA's parallel_based (fla/ops/based/parallel.py).
// Based has no recurrent state in FLA's API, and none here: the op is o from q, k, v.
// Every tensor is float64 and head_last (reference/README.md, rule 1). Shares no code with
// kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps FLA's parallel_based adds to the normaliser.
constexpr double kBasedNormEps = 1e-6;

struct BasedInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch
    double scale = 0.0;               // 0: K^-0.5
    bool use_norm = true;
};

struct BasedGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
};

/// o [B, T, H, V] by the quadratic (parallel) form, query rows in blocks of 256.
at::Tensor based_fwd(const BasedInputs& in);

/// Gradients of L = Σ o·d_o through the quadratic form; memory O(H·256·L) per sequence.
BasedGrads based_bwd(const BasedInputs& in, const at::Tensor& d_o);

/// The independent form for validating based_fwd: the feature-map recurrence with
/// φ(x) = [1, x, vec(x xᵀ)/√2] (1 + K + K² features), S_t = S_{t-1} + φ(k_t) v_tᵀ,
/// z_t = z_{t-1} + φ(k_t), o_t = S_tᵀ φ(scale q_t) / (z_t·φ(scale q_t) + 1e-6).
at::Tensor based_fwd_recurrent(const BasedInputs& in);

}  // namespace lav::ref
