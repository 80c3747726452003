// kernels/based/based.h — Based arguments, results, CPU entry points and precision contracts.
//
// Causal linear attention with the 2nd-order Taylor kernel and its normaliser
// (fla/ops/based/parallel.py): with x_ts = scale·q_t·k_s over s ≤ t,
//   o_t = Σ_s (1 + x_ts + x_ts²/2) v_s / (Σ_s (1 + x_ts + x_ts²/2) + 1e-6)
// Variants: "parallel" (the quadratic form per sequence, FLA's parallel_based), "chunk" (the
// feature map φ(x) = [1, x, vec(x xᵀ)/√2] carries a [1 + K + K², V + 1] state between chunks,
// FLA's fused_chunk_based) and "recurrent" (that state step by step). There is no initial or
// final state, as in FLA's API (README.md says why). Both layouts; varlen with B == 1.
//
//   BasedArgs args{q, k, v};
//   at::Tensor o = based_fwd_cpu("chunk", args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct BasedArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool use_norm = true;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // stored chunk states
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
};

struct BasedGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
};

/// o in v's layout and the output dtype, by `variant` ("parallel", "chunk" or "recurrent").
at::Tensor based_fwd_cpu(std::string_view variant, const BasedArgs& args);
/// Gradients of Σ o·d_o; d_o is like o. Recomputes the forward; saves nothing.
BasedGrads based_bwd_cpu(std::string_view variant, const BasedArgs& args, const at::Tensor& d_o);

/// The precision contract of `variant`, `backward` or forward, for the dtypes of `args`; its
/// items include "o", "dq", "dk", "dv".
PrecisionContract based_contract(std::string_view variant, bool backward, const BasedArgs& args);

/// The arguments of a row call (q, k, v, use_norm and the common settings), and the gradients by
/// name, for the family's rows (based_rows.cpp).
BasedArgs based_args(const Call& call);
TensorMap results(const BasedGrads& g);

}  // namespace lav::kernels
