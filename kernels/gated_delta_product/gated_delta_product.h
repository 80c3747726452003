// kernels/gated_delta_product/gated_delta_product.h — gated DeltaProduct arguments, results,
// contracts.
//
// Per head, token t decays the state once and then applies n = num_householder delta-rule
// sub-steps, and the output reads the state after the last one:
//   S ← exp(g_t) S;  for j < n: S ← S + β_{t,j} k_{t,j} (v_{t,j} − Sᵀ k_{t,j})ᵀ;  o_t = scale Sᵀ
//   q_t
// k, v and β carry the sub-steps interleaved along time (row t·n + j is sub-step j of token t,
// FLA's layout); q, g and o are per token. As in fla/ops/gated_delta_product/chunk.py the
// algorithms are the gated delta rule's over the interleaved sequence of T·n sub-steps, with g
// on each token's first sub-step and q on its last. Both layouts are read through strides;
// varlen batches pass token offsets in cu_seqlens with B == 1.
//
//   GatedDeltaProductArgs args{q, k, v, g, beta};   // k, v, beta with T·n rows
//   args.num_householder = 2;
//   GatedDeltaProductFwd out = gated_delta_product_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct GatedDeltaProductArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // [B, T·n, H, K] / [B, H, T·n, K]; input dtype
    at::Tensor v;           // [B, T·n, H, V] / [B, H, T·n, V]; input dtype
    at::Tensor g;           // [B, T, H] / [B, H, T] log decay; undefined: no decay
    at::Tensor beta;        // [B, T·n, H] / [B, H, T·n]
    at::Tensor h0;          // [N, H, K, V] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 token offsets on CPU; undefined: dense batch
    Layout layout = Layout::head_last;
    int64_t num_householder = 1;
    double scale = 0.0;  // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, final state, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;  // in sub-steps, as FLA's WY and backward passes count them
    /// the chunk forward also returns its stored chunk states (for comparison, not for speed)
    bool keep_chunk_states = false;
};

struct GatedDeltaProductFwd {
    at::Tensor o;   // [B, T, H, V] in the layout; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk of the interleaved
    /// sub-steps as the output pass reads it (FLA's h), chunks of chunk_size sub-steps numbered
    /// by chunk_index() over the L·num_householder sub-steps of each sequence; chunk forward
    /// with keep_chunk_states only
    at::Tensor h;
};

/// Gradients w.r.t. the tensors as passed (raw q, k with the in-kernel norm).
struct GatedDeltaProductGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
    at::Tensor dg, dbeta;   // like g (undefined without g) and beta
    at::Tensor dh0;         // like h0 but in the state dtype; undefined without h0
};

GatedDeltaProductFwd gated_delta_product_chunk_fwd_cpu(const GatedDeltaProductArgs& args);
/// d_o is like o, dht like ht. Recomputes the WY form and chunk states; saves nothing.
GatedDeltaProductGrads gated_delta_product_chunk_bwd_cpu(const GatedDeltaProductArgs& args,
                                                         const at::Tensor& d_o,
                                                         const at::Tensor& dht);
GatedDeltaProductFwd gated_delta_product_recurrent_fwd_cpu(const GatedDeltaProductArgs& args);
GatedDeltaProductGrads gated_delta_product_recurrent_bwd_cpu(const GatedDeltaProductArgs& args,
                                                             const at::Tensor& d_o,
                                                             const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes and options of `args`; its items name every tensor the variant stores, the
/// observable results ("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0") included.
PrecisionContract gated_delta_product_contract(std::string_view variant, bool backward,
                                               const GatedDeltaProductArgs& args);

/// The arguments of a row call (q, k, v, g, beta, h0, the options and the common settings),
/// and the results by name, for the family's rows (gated_delta_product_rows.cpp).
GatedDeltaProductArgs gated_delta_product_args(const Call& call);
TensorMap results(const GatedDeltaProductFwd& f);
TensorMap results(const GatedDeltaProductGrads& g);

}  // namespace lav::kernels
