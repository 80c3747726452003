// kernels/rwkv6/rwkv6.h — rwkv6 arguments, results and precision contracts.
//
// rwkv6 is linear attention with a per-key-dimension data-dependent decay w and a per-head bonus
// u on the current token; the output reads the state before the step:
//   o_t = scale · [ S_{t-1}ᵀ q_t + (Σ_d q_td u_d k_td) v_t ],   S_t = diag(exp(w_t)) S_{t-1} + k_t
//   v_tᵀ
// q is FLA's r. q, k and w are [B, T, H, K] (head_last) or [B, H, T, K] (head_first), read
// through strides; u is [H, K]. Varlen batches pass cu_seqlens with B == 1.
//
//   Rwkv6Args args{q, k, v, w, u};          // bf16 inputs, fp32 w and u
//   Rwkv6Fwd out = rwkv6_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct Rwkv6Args {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor w;           // like q: log decay per key dimension, in the gate dtype
    at::Tensor u;           // [H, K] bonus, in the gate dtype
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

struct Rwkv6Fwd {
    at::Tensor o;   // layout of q, [.., V]; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

struct Rwkv6Grads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
    at::Tensor dw;          // like w (layout and dtype)
    at::Tensor du;          // like u
    at::Tensor dh0;         // like h0 but in the state dtype; undefined without h0
};

Rwkv6Fwd rwkv6_chunk_fwd_cpu(const Rwkv6Args& args);
/// d_o is like o, dht like ht (undefined: zeros). Recomputes the chunk states; saves nothing
/// from the forward.
Rwkv6Grads rwkv6_chunk_bwd_cpu(const Rwkv6Args& args, const at::Tensor& d_o, const at::Tensor& dht);
Rwkv6Fwd rwkv6_recurrent_fwd_cpu(const Rwkv6Args& args);
Rwkv6Grads rwkv6_recurrent_bwd_cpu(const Rwkv6Args& args, const at::Tensor& d_o,
                                   const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for the
/// dtypes of `args`. Its items name every tensor the variant stores, including "o", "ht", "dq",
/// "dk", "dv", "dw", "du", "dh0" for the observable results.
PrecisionContract rwkv6_contract(std::string_view variant, bool backward, const Rwkv6Args& args);

/// The arguments of a row call (q, k, v, w, u, h0 and the common settings), and the results by
/// name, for the rows of every backend (rwkv6_rows.cpp).
Rwkv6Args rwkv6_args(const Call& call);
TensorMap results(const Rwkv6Fwd& f);
TensorMap results(const Rwkv6Grads& g);

}  // namespace lav::kernels
