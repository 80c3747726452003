// kernels/delta_rule/delta_rule.h — DeltaNet arguments, results and precision contracts.
//
// The delta rule is linear attention whose state is corrected toward each new value:
//   u_t = β_t (v_t − S_{t-1}ᵀ k_t),   S_t = S_{t-1} + k_t u_tᵀ,   o_t = scale · S_tᵀ q_t
// i.e. S_t = (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ, stable for ‖k_t‖ = 1 and β_t ∈ (0, 2).
// With use_qk_l2norm_in_kernel, q and k are replaced by x / sqrt(Σ x² + 1e-6) first. Both
// layouts are read through strides: q is [B, T, H, K] (head_last) or [B, H, T, K]
// (head_first). Varlen batches pass cu_seqlens with B == 1.
//
//   DeltaRuleArgs args{q, k, v, beta};   // bf16 q, k, v; fp32 beta
//   args.use_qk_l2norm_in_kernel = true;
//   DeltaRuleFwd out = delta_rule_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct DeltaRuleArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor beta;        // [B, T, H] / [B, H, T]; any kernel dtype
    at::Tensor h0;          // [N, H, K, V] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, final state, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
    /// the chunk forward also returns its stored chunk states (for comparison, not for speed)
    bool keep_chunk_states = false;
};

struct DeltaRuleFwd {
    at::Tensor o;   // layout of q, [.., V]; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

struct DeltaRuleGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype); w.r.t. the raw q, k
    at::Tensor dbeta;       // like beta
    at::Tensor dh0;         // like h0 but in the state dtype; undefined without h0
};

DeltaRuleFwd delta_rule_chunk_fwd_cpu(const DeltaRuleArgs& args);
/// d_o is like o, dht like ht. Recomputes the WY form and chunk states; saves nothing.
DeltaRuleGrads delta_rule_chunk_bwd_cpu(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                        const at::Tensor& dht);
DeltaRuleFwd delta_rule_recurrent_fwd_cpu(const DeltaRuleArgs& args);
DeltaRuleGrads delta_rule_recurrent_bwd_cpu(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                            const at::Tensor& dht);

/// The CUDA backend (builds with CUDA only): the tensors of `args` on one CUDA device,
/// cu_seqlens int32 or int64 on any device; results on that device. The chunk kernels take keys
/// up to 256 and chunks up to 64.
DeltaRuleFwd delta_rule_recurrent_fwd_cuda(const DeltaRuleArgs& args);
DeltaRuleGrads delta_rule_recurrent_bwd_cuda(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                             const at::Tensor& dht);
DeltaRuleFwd delta_rule_chunk_fwd_cuda(const DeltaRuleArgs& args);
DeltaRuleGrads delta_rule_chunk_bwd_cuda(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                         const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes of `args`. Its items name every tensor the variant stores, including
/// "o", "ht", "dq", "dk", "dv", "dbeta", "dh0" for the observable results.
PrecisionContract delta_rule_contract(std::string_view variant, bool backward,
                                      const DeltaRuleArgs& args);

/// The arguments of a row call (q, k, v, beta, h0, the l2norm option and the common
/// settings), and the results by name, for the rows of every backend (delta_rule_rows.cpp).
DeltaRuleArgs delta_rule_args(const Call& call);
TensorMap results(const DeltaRuleFwd& f);
TensorMap results(const DeltaRuleGrads& g);

}  // namespace lav::kernels
