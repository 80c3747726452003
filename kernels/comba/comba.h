// kernels/comba/comba.h — Comba arguments, results, CPU entry points and precision contracts.
//
// Comba is a gated delta rule whose correction reads the state before the decay, through an
// auxiliary key p:
//   u_t = β_t (v_t − S_{t-1}ᵀ p_t),   S_t = exp(g_t) S_{t-1} + k_t u_tᵀ,   o_t = scale S_tᵀ q_t
// (fla/ops/comba/chunk.py; README.md says why this order and not naive_recurrent_comba's).
// use_qk_l2norm_in_kernel normalises q, k and p. Both layouts are read through strides; varlen
// batches pass cu_seqlens with B == 1.
//
//   CombaArgs args{q, k, v, p, g, beta};   // bf16 q, k, v, p; fp32 g, beta
//   CombaFwd out = comba_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct CombaArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor p;           // like q: the auxiliary key
    at::Tensor g;           // [B, T, H] / [B, H, T] log decay
    at::Tensor beta;        // [B, T, H] / [B, H, T]
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

struct CombaFwd {
    at::Tensor o;   // layout of v; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

/// Gradients w.r.t. the tensors as passed (raw q, k, p with the in-kernel norm).
struct CombaGrads {
    at::Tensor dq, dk, dv, dp;  // like q, k, v, p (layout and dtype)
    at::Tensor dg, dbeta;       // like g and beta
    at::Tensor dh0;             // like h0 but in the state dtype; undefined without h0
};

CombaFwd comba_chunk_fwd_cpu(const CombaArgs& args);
/// d_o is like o, dht like ht. Recomputes the WY form and chunk states; saves nothing.
CombaGrads comba_chunk_bwd_cpu(const CombaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);
CombaFwd comba_recurrent_fwd_cpu(const CombaArgs& args);
CombaGrads comba_recurrent_bwd_cpu(const CombaArgs& args, const at::Tensor& d_o,
                                   const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes and options of `args`; its items include "o", "ht", "dq", "dk", "dv", "dp",
/// "dg", "dbeta", "dh0" for the observable results (those the case has).
PrecisionContract comba_contract(std::string_view variant, bool backward, const CombaArgs& args);

/// The arguments of a row call (q, k, v, p, g, beta, h0, the l2norm option and the common
/// settings), and the results by name, for the rows of every backend (comba_rows.cpp).
CombaArgs comba_args(const Call& call);
TensorMap results(const CombaFwd& f);
TensorMap results(const CombaGrads& g);

}  // namespace lav::kernels
