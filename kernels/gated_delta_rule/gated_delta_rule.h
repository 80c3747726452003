// kernels/gated_delta_rule/gated_delta_rule.h — Gated DeltaNet arguments, results, contracts.
//
// The delta rule with a scalar per-head decay and grouped value heads (GVA): per value head hv,
// reading the q, k of key head hv / (HV / H),
//   S̄ = exp(g_t) S_{t-1},   u_t = β_t (v_t − S̄ᵀ k_t),   S_t = S̄ + k_t u_tᵀ,   o_t = scale S_tᵀ q_t
// FLA's in-kernel options are supported, gradients included: use_qk_l2norm_in_kernel
// (q, k ← x / sqrt(Σ x² + 1e-6)), use_gate_in_kernel (g is raw and
// g ← −exp(A_log)·softplus(g + dt_bias)), use_beta_sigmoid_in_kernel (β ← sigmoid(β), ×2 with
// allow_neg_eigval). Both layouts are read through strides; varlen batches pass cu_seqlens
// with B == 1.
//
//   GatedDeltaRuleArgs args{q, k, v, g, beta};   // bf16 q, k, v; fp32 g, beta
//   args.use_qk_l2norm_in_kernel = true;
//   GatedDeltaRuleFwd out = gated_delta_rule_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct GatedDeltaRuleArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, HV, V] / [B, HV, T, V]; input dtype; HV a multiple of H
    at::Tensor g;           // [B, T, HV] / [B, HV, T] log decay (raw with use_gate_in_kernel)
    at::Tensor beta;        // [B, T, HV] / [B, HV, T] (raw logits with the sigmoid)
    at::Tensor A_log;       // [HV]; with use_gate_in_kernel
    at::Tensor dt_bias;     // [HV]; with use_gate_in_kernel, undefined: 0
    at::Tensor h0;          // [N, HV, K, V] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    bool use_gate_in_kernel = false;
    bool use_beta_sigmoid_in_kernel = false;
    bool allow_neg_eigval = false;                              // needs use_beta_sigmoid_in_kernel
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, final state, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
    /// the chunk forward also returns its stored chunk states (for comparison, not for speed)
    bool keep_chunk_states = false;
};

struct GatedDeltaRuleFwd {
    at::Tensor o;   // layout of v; output dtype
    at::Tensor ht;  // [N, HV, K, V]; state dtype
    /// [NT, HV, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

/// Gradients w.r.t. the tensors as passed: the raw q, k, g and β where the options transform
/// them. dq and dk sum over each key head's value heads.
struct GatedDeltaRuleGrads {
    at::Tensor dq, dk, dv;        // like q, k, v (layout and dtype)
    at::Tensor dg, dbeta;         // like g and beta
    at::Tensor dA_log, ddt_bias;  // like A_log and dt_bias; with use_gate_in_kernel
    at::Tensor dh0;               // like h0 but in the state dtype; undefined without h0
};

GatedDeltaRuleFwd gated_delta_rule_chunk_fwd_cpu(const GatedDeltaRuleArgs& args);
/// d_o is like o, dht like ht. Recomputes the WY form and chunk states; saves nothing.
GatedDeltaRuleGrads gated_delta_rule_chunk_bwd_cpu(const GatedDeltaRuleArgs& args,
                                                   const at::Tensor& d_o, const at::Tensor& dht);
GatedDeltaRuleFwd gated_delta_rule_recurrent_fwd_cpu(const GatedDeltaRuleArgs& args);
GatedDeltaRuleGrads gated_delta_rule_recurrent_bwd_cpu(const GatedDeltaRuleArgs& args,
                                                       const at::Tensor& d_o,
                                                       const at::Tensor& dht);

/// The CUDA backend (builds with CUDA only): the tensors of `args` on one CUDA device,
/// cu_seqlens int32 or int64 on any device; results on that device. The chunk kernels take keys
/// up to 256 and chunks up to 64.
GatedDeltaRuleFwd gated_delta_rule_recurrent_fwd_cuda(const GatedDeltaRuleArgs& args);
GatedDeltaRuleGrads gated_delta_rule_recurrent_bwd_cuda(const GatedDeltaRuleArgs& args,
                                                        const at::Tensor& d_o,
                                                        const at::Tensor& dht);
GatedDeltaRuleFwd gated_delta_rule_chunk_fwd_cuda(const GatedDeltaRuleArgs& args);
GatedDeltaRuleGrads gated_delta_rule_chunk_bwd_cuda(const GatedDeltaRuleArgs& args,
                                                    const at::Tensor& d_o, const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes and options of `args`. Its items name every tensor the variant stores, including
/// "o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0" for the observable
/// results (those the case has).
PrecisionContract gated_delta_rule_contract(std::string_view variant, bool backward,
                                            const GatedDeltaRuleArgs& args);

/// The arguments of a row call (q, k, v, g, beta, A_log, dt_bias, h0, the options and the
/// common settings), and the results by name, for the rows of every backend
/// (gated_delta_rule_rows.cpp).
GatedDeltaRuleArgs gated_delta_rule_args(const Call& call);
TensorMap results(const GatedDeltaRuleFwd& f);
TensorMap results(const GatedDeltaRuleGrads& g);

}  // namespace lav::kernels
