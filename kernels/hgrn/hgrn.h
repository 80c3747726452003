// kernels/hgrn/hgrn.h — hgrn arguments, results and precision contracts.
//
// hgrn is HGRN's elementwise gated recurrence, one independent scalar state per channel:
//   h_t = exp(g_t) ⊙ h_{t-1} + x_t,   o_t = h_t
// HGRN's width D is split into H heads of K channels (D = H·K), so x, g and o are [B, T, H, K]
// (head_last) or [B, H, T, K] (head_first), read through strides, and states are [N, H, K].
// There are no q, k, v and no scale. Varlen batches pass cu_seqlens with B == 1.
//
//   HgrnArgs args{x, g};                  // bf16 x, fp32 gate
//   args.state_dtype = at::kFloat;
//   HgrnFwd out = hgrn_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct HgrnArgs {
    at::Tensor x;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor g;           // like x: log decay per channel, in the gate dtype
    at::Tensor h0;          // [N, H, K] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, final state, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: x's dtype
    int64_t chunk_size = 64;
};

struct HgrnFwd {
    at::Tensor o;   // like x (layout); output dtype
    at::Tensor ht;  // [N, H, K]; state dtype
};

struct HgrnGrads {
    at::Tensor dx;   // like x (layout and dtype)
    at::Tensor dg;   // like g (layout and dtype)
    at::Tensor dh0;  // like h0 but in the state dtype; undefined without h0
};

HgrnFwd hgrn_chunk_fwd_cpu(const HgrnArgs& args);
/// d_o is like o, dht like ht (undefined: zeros). Recomputes the chunk states; saves nothing
/// from the forward.
HgrnGrads hgrn_chunk_bwd_cpu(const HgrnArgs& args, const at::Tensor& d_o, const at::Tensor& dht);
HgrnFwd hgrn_recurrent_fwd_cpu(const HgrnArgs& args);
HgrnGrads hgrn_recurrent_bwd_cpu(const HgrnArgs& args, const at::Tensor& d_o,
                                 const at::Tensor& dht);

/// The CUDA backend (builds with CUDA only): the tensors of `args` on one CUDA device,
/// cu_seqlens int32 or int64 on any device; results on that device.
HgrnFwd hgrn_recurrent_fwd_cuda(const HgrnArgs& args);
HgrnGrads hgrn_recurrent_bwd_cuda(const HgrnArgs& args, const at::Tensor& d_o,
                                  const at::Tensor& dht);
HgrnFwd hgrn_chunk_fwd_cuda(const HgrnArgs& args);
HgrnGrads hgrn_chunk_bwd_cuda(const HgrnArgs& args, const at::Tensor& d_o, const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes of `args`. Its items name every tensor the variant stores, including
/// "o", "ht", "dx", "dg", "dh0" for the observable results.
PrecisionContract hgrn_contract(std::string_view variant, bool backward, const HgrnArgs& args);

/// The arguments of a row call (x, g, h0 and the common settings but the scale), and the
/// results by name, for the rows of every backend (hgrn_rows.cpp).
HgrnArgs hgrn_args(const Call& call);
TensorMap results(const HgrnFwd& f);
TensorMap results(const HgrnGrads& g);

}  // namespace lav::kernels
