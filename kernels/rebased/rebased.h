// kernels/rebased/rebased.h — ReBased arguments, results, CPU entry points and precision
// contracts.
//
// Causal linear attention with the squared-score kernel and its normaliser
// (fla/ops/rebased/parallel.py): with x_ts = scale·q_t·k_s over s ≤ t (scale = K^-0.5 with
// use_scale, else 1),
//   o_t = Σ_s x_ts² v_s / (Σ_s x_ts² + 1e-5)          (without use_normalize: the sum)
// Variants as Based's (kernels/based/based.h): "parallel", "chunk" (feature map
// φ(x) = vec(x xᵀ), a [K², V + 1] state between chunks) and "recurrent". No initial or final
// state, as in FLA. Both layouts; varlen with B == 1.
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct RebasedArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch
    Layout layout = Layout::head_last;
    bool use_scale = true;
    bool use_normalize = true;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // stored chunk states
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
};

struct RebasedGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
};

/// o in v's layout and the output dtype, by `variant` ("parallel", "chunk" or "recurrent").
at::Tensor rebased_fwd_cpu(std::string_view variant, const RebasedArgs& args);
/// Gradients of Σ o·d_o; d_o is like o. Recomputes the forward; saves nothing.
RebasedGrads rebased_bwd_cpu(std::string_view variant, const RebasedArgs& args,
                             const at::Tensor& d_o);

/// The precision contract of `variant`, `backward` or forward; items include "o", "dq", "dk",
/// "dv".
PrecisionContract rebased_contract(std::string_view variant, bool backward,
                                   const RebasedArgs& args);

/// The arguments of a row call (q, k, v, use_scale, use_normalize and the common settings), and the
/// gradients by name, for the family's rows (rebased_rows.cpp).
RebasedArgs rebased_args(const Call& call);
TensorMap results(const RebasedGrads& g);

}  // namespace lav::kernels
