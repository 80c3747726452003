// kernels/rwkv7/rwkv7.h — rwkv7 (generalized delta rule, DPLR and IPLR) arguments, results and
// precision contracts.
//
// The state takes a diagonal decay plus a rank-one correction read from the state itself:
//   S_t = diag(exp(w_t)) S_{t-1} + b_t (a_tᵀ S_{t-1}) + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
// (DPLR; without w, IPLR: D = I). q is FLA's r. q, w, k, a, b are [B, T, H, K] (head_last) or
// [B, H, T, K] (head_first), read through strides. Varlen batches pass cu_seqlens with B == 1.
//
//   Rwkv7Args args{q, w, k, v, a, b};       // fp16 inputs, fp32 w; w undefined for IPLR
//   args.scale = 1.0;                       // chunk_rwkv7's default
//   Rwkv7Fwd out = rwkv7_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct Rwkv7Args {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor w;           // like q: log decay per key dim, in the gate dtype; undefined: IPLR
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor a;           // like q: reads the state, a_tᵀ S_{t-1}
    at::Tensor b;           // like q: writes it back, b_t (a_tᵀ S_{t-1})
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

struct Rwkv7Fwd {
    at::Tensor o;   // layout of q, [.., V]; output dtype
    at::Tensor ht;  // [N, H, K, V]; state dtype
    /// [NT, H, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

struct Rwkv7Grads {
    at::Tensor dq, dk, dv, da, db;  // like q, k, v, a, b (layout and dtype)
    at::Tensor dw;                  // like w; undefined for IPLR
    at::Tensor dh0;                 // like h0 but in the state dtype; undefined without h0
};

Rwkv7Fwd rwkv7_chunk_fwd_cpu(const Rwkv7Args& args);
/// d_o is like o, dht like ht (undefined: zeros). Recomputes the chunk states, then
/// differentiates each chunk's forward ops by reverse mode, last chunk first.
Rwkv7Grads rwkv7_chunk_bwd_cpu(const Rwkv7Args& args, const at::Tensor& d_o, const at::Tensor& dht);
Rwkv7Fwd rwkv7_recurrent_fwd_cpu(const Rwkv7Args& args);
Rwkv7Grads rwkv7_recurrent_bwd_cpu(const Rwkv7Args& args, const at::Tensor& d_o,
                                   const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for the
/// dtypes of `args`. Its items name every tensor the variant stores, including "o", "ht", "dq",
/// "dk", "dv", "da", "db", "dw" (DPLR), "dh0" for the observable results.
PrecisionContract rwkv7_contract(std::string_view variant, bool backward, const Rwkv7Args& args);

/// The arguments of a row call (q, w, k, v, a, b or −a for the option b = neg_a, h0, the
/// common settings and chunk_rwkv7's default scale 1.0), and the results by name, for the rows
/// of every backend (rwkv7_rows.cpp).
Rwkv7Args rwkv7_args(const Call& call);
TensorMap results(const Rwkv7Fwd& f);
TensorMap results(const Rwkv7Grads& g);

}  // namespace lav::kernels
