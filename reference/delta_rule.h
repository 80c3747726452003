// reference/delta_rule.h — float64 delta rule (DeltaNet): recurrence, backward, WY form.
//
//   u_t = β_t (v_t − S_{t-1}ᵀ k_t),   S_t = S_{t-1} + k_t u_tᵀ,   o_t = scale · S_tᵀ q_t
// (S_{-1} = h0), i.e. S_t = (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ. With
// use_qk_l2norm_in_kernel, q and k are first replaced by x / sqrt(Σ x² + 1e-6) and gradients
// flow through that normalisation. Every tensor is float64 and head_last ([B, T, H, D]); a
// tensor of any other dtype is a harness bug and throws InternalError
// (reference/README.md, rule 1). Shares no code with kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr double kDeltaRuleL2NormEps = 1e-6;

struct DeltaRuleInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor beta;                  // [B, T, H] fp64
    at::Tensor h0;                    // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    int64_t state_stride = 0;  // > 0: the forward also returns states (below)
};

struct DeltaRuleOutputs {
    at::Tensor o;   // [B, T, H, V] fp64
    at::Tensor ht;  // [N, H, K, V] fp64
    /// [NT, H, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct DeltaRuleGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (w.r.t. the raw q, k when normalising)
    at::Tensor dbeta;       // [B, T, H]
    at::Tensor dh0;         // [N, H, K, V]; undefined without h0
};

/// The step-by-step recurrence.
DeltaRuleOutputs delta_rule_fwd(const DeltaRuleInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(H·K·V·√L) per sequence.
DeltaRuleGrads delta_rule_bwd(const DeltaRuleInputs& in, const at::Tensor& d_o,
                              const at::Tensor& dht);

/// An independent form for validating delta_rule_fwd: the WY (UT) form over each whole
/// sequence, U = (I + A)⁻¹ diag(β) (V − K h0) with A = strict_lower(diag(β) K Kᵀ), solved by
/// a triangular solve; O = scale·(Q h0 + tril(Q Kᵀ) U), ht = h0 + Kᵀ U. Quadratic in L.
DeltaRuleOutputs delta_rule_fwd_wy(const DeltaRuleInputs& in);

}  // namespace lav::ref
