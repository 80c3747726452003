// reference/gated_delta_rule.h — float64 Gated DeltaNet: recurrence, backward, WY form.
//
// Per value head hv, with key head h = hv / (HV / H) (grouped value attention, GVA):
//   S̄ = exp(g_t) S_{t-1},   u_t = β_t (v_t − S̄ᵀ k_t),   S_t = S̄ + k_t u_tᵀ,
//   o_t = scale · S_tᵀ q_t                                   (S_{-1} = h0)
// i.e. S_t = exp(g_t) (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ. The in-kernel options of FLA's
// chunk_gated_delta_rule (fla/ops/gated_delta_rule/chunk.py, fla/modules/l2norm.py,
// fla/ops/gated_delta_rule/gate.py) are part of the op here, gradients included:
//   use_qk_l2norm_in_kernel:    q, k ← x / sqrt(Σ x² + 1e-6)
//   use_gate_in_kernel:         g ← −exp(A_log[hv]) · softplus(g + dt_bias[hv])
//   use_beta_sigmoid_in_kernel: β ← sigmoid(β), times 2 with allow_neg_eigval
// Every tensor is float64 and head_last; a tensor of any other dtype is a harness bug and
// throws InternalError (reference/README.md, rule 1). Shares no code with kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr double kGatedDeltaRuleL2NormEps = 1e-6;

struct GatedDeltaRuleInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, HV, V] fp64, HV a multiple of H
    at::Tensor g;                     // [B, T, HV] fp64 log decay (raw with use_gate_in_kernel)
    at::Tensor beta;                  // [B, T, HV] fp64 (raw logits with the sigmoid)
    at::Tensor A_log;                 // [HV] fp64; with use_gate_in_kernel
    at::Tensor dt_bias;               // [HV] fp64; with use_gate_in_kernel, undefined: 0
    at::Tensor h0;                    // [N, HV, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    bool use_gate_in_kernel = false;
    bool use_beta_sigmoid_in_kernel = false;
    bool allow_neg_eigval = false;  // β = 2 sigmoid(x); needs use_beta_sigmoid_in_kernel
    int64_t state_stride = 0;       // > 0: the forward also returns states (below)
};

struct GatedDeltaRuleOutputs {
    at::Tensor o;   // [B, T, HV, V] fp64
    at::Tensor ht;  // [N, HV, K, V] fp64
    /// [NT, HV, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

/// Gradients w.r.t. the inputs as passed (raw q, k, g, β where the options transform them).
struct GatedDeltaRuleGrads {
    at::Tensor dq, dk, dv;        // like q, k, v
    at::Tensor dg, dbeta;         // like g and beta
    at::Tensor dA_log, ddt_bias;  // [HV]; with use_gate_in_kernel (ddt_bias: with dt_bias)
    at::Tensor dh0;               // [N, HV, K, V]; undefined without h0
};

/// The step-by-step recurrence.
GatedDeltaRuleOutputs gated_delta_rule_fwd(const GatedDeltaRuleInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence
/// that recomputes states from checkpoints every ⌈√L⌉ steps: memory O(HV·K·V·√L) per sequence.
GatedDeltaRuleGrads gated_delta_rule_bwd(const GatedDeltaRuleInputs& in, const at::Tensor& d_o,
                                         const at::Tensor& dht);

/// An independent form for validating gated_delta_rule_fwd: the WY (UT) form over each whole
/// sequence. With G the inclusive cumsum of g along the sequence, D[i, j] = exp(G_i − G_j) for
/// j ≤ i, A = strict_lower(diag(β) (K Kᵀ) ⊙ D) and U = (I + A)⁻¹ diag(β) (V − diag(e^G) K h0)
/// by a triangular solve:
///   O = scale·(diag(e^G) Q h0 + ((Q Kᵀ) ⊙ D) U),   ht = e^{G_last} h0 + Kᵀ diag(e^{G_last − G}) U
/// Quadratic in L.
GatedDeltaRuleOutputs gated_delta_rule_fwd_wy(const GatedDeltaRuleInputs& in);

}  // namespace lav::ref
