// kernels/gla/gla.h — gla arguments, results and precision contracts.
//
// gla is causal linear attention whose state decays by one factor per key dimension:
//   S_t = diag(exp(g_t)) · S_{t-1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
// with g a data-dependent log decay [B, T, H, K] (GLA; HGRN2 runs on the same kernel). Both
// layouts are read through strides: q, k and g are [B, T, H, K] (head_last) or [B, H, T, K]
// (head_first). Varlen batches pass cu_seqlens with B == 1.
//
//   GlaArgs args{q, k, v, g};             // bf16 inputs, fp32 gate
//   args.state_dtype = at::kFloat;
//   GlaFwd out = gla_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct GlaArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor g;           // like q: log decay per key dimension, in the gate dtype
    at::Tensor h0;          // [N, H, K, V] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    double scale = 0.0;                                         // 0: K^-0.5
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, final state, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
    /// the chunk forward also returns its stored chunk states (for comparison, not for speed)
    bool keep_chunk_states = false;
};

struct GlaFwd {
    at::Tensor o;   // layout of q, [.., V]; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

struct GlaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
    at::Tensor dg;          // like g (layout and dtype)
    at::Tensor dh0;         // like h0 but in the state dtype; undefined without h0
};

GlaFwd gla_chunk_fwd_cpu(const GlaArgs& args);
/// d_o is like o, dht like ht (undefined: zeros). Recomputes the chunk states; saves nothing
/// from the forward.
GlaGrads gla_chunk_bwd_cpu(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);
GlaFwd gla_recurrent_fwd_cpu(const GlaArgs& args);
GlaGrads gla_recurrent_bwd_cpu(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);

/// The CUDA backend (builds with CUDA only): the tensors of `args` on one CUDA device,
/// cu_seqlens int32 or int64 on any device; results on that device.
GlaFwd gla_recurrent_fwd_cuda(const GlaArgs& args);
GlaGrads gla_recurrent_bwd_cuda(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);
GlaFwd gla_chunk_fwd_cuda(const GlaArgs& args);
GlaGrads gla_chunk_bwd_cuda(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes of `args`. Its items name every tensor the variant stores, including
/// "o", "ht", "dq", "dk", "dv", "dg", "dh0" for the observable results.
PrecisionContract gla_contract(std::string_view variant, bool backward, const GlaArgs& args);

/// The arguments of a row call (q, k, v, g, h0 and the common settings), and the results by
/// name, for the rows of every backend (gla_rows.cpp).
GlaArgs gla_args(const Call& call);
TensorMap results(const GlaFwd& f);
TensorMap results(const GlaGrads& g);

}  // namespace lav::kernels
