// kernels/gsa/gsa.h — gsa (Gated Slot Attention) arguments, results and precision contracts.
//
// gsa runs two gated linear-attention passes over M memory slots with a softmax between them.
// Per head, with slot scores s_t ∈ R^M and a log forget gate g_t ∈ R^M shared by both states:
//   Hk_t = Hk_{t-1} · diag(exp(g_t)) + k_t s_tᵀ,   p_t = softmax(scale · Hk_tᵀ q_t)    key pass
//   Hv_t = diag(exp(g_t)) · Hv_{t-1} + s_t v_tᵀ,   o_t = Hv_tᵀ p_t                    value pass
// Both layouts are read through strides: q, k are [B, T, H, K] (head_last) or [B, H, T, K]
// (head_first), v is [.., V], s and g are [.., M]. Varlen batches pass cu_seqlens with B == 1.
// Both states, their initial values, final values and gradients are stored in state_dtype
// ("states in fp32" is state_dtype = fp32 for Hk and Hv alike), unless hk_dtype or hv_dtype
// gives one of them its own (a scenario's state = { hk = "fp32", hv = "bf16" }).
//
//   GsaArgs args{q, k, v, s, g};          // bf16 inputs, fp32 gate
//   args.state_dtype = at::kFloat;
//   args.hv_dtype = at::kBFloat16;        // Hv stored in bf16, Hk in fp32
//   GsaFwd out = gsa_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct GsaArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor s;           // [B, T, H, M] / [B, H, T, M]: slot scores; input dtype
    at::Tensor g;           // like s: log forget gate per slot, in the gate dtype
    at::Tensor hk0;         // [N, H, K, M] initial key state; undefined: zeros
    at::Tensor hv0;         // [N, H, M, V] initial value state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    double scale = 0.0;                                         // 0: K^-0.5
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // both states: chunk, final, grads
    c10::ScalarType hk_dtype = c10::ScalarType::Undefined;      // Hk's own; Undefined: state_dtype
    c10::ScalarType hv_dtype = c10::ScalarType::Undefined;      // Hv's own; Undefined: state_dtype
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;

    c10::ScalarType hk_state() const { return own_or_state(hk_dtype); }
    c10::ScalarType hv_state() const { return own_or_state(hv_dtype); }

  private:
    c10::ScalarType own_or_state(c10::ScalarType own) const {
        return own == c10::ScalarType::Undefined ? state_dtype : own;
    }
};

struct GsaFwd {
    at::Tensor o;    // layout of v; output dtype
    at::Tensor hkt;  // [N, H, K, M]; Hk's state dtype
    at::Tensor hvt;  // [N, H, M, V]; Hv's state dtype
};

struct GsaGrads {
    at::Tensor dq, dk, dv, ds;  // like q, k, v, s (layout and dtype)
    at::Tensor dg;              // like g (layout and dtype)
    at::Tensor dhk0;            // like hk0 but in Hk's state dtype; undefined without hk0
    at::Tensor dhv0;            // like hv0 but in Hv's state dtype; undefined without hv0
};

GsaFwd gsa_chunk_fwd_cpu(const GsaArgs& args);
/// d_o is like o, dhkt like hkt, dhvt like hvt (undefined: zeros). Recomputes the chunk states
/// and slot probabilities; saves nothing from the forward.
GsaGrads gsa_chunk_bwd_cpu(const GsaArgs& args, const at::Tensor& d_o, const at::Tensor& dhkt,
                           const at::Tensor& dhvt);
GsaFwd gsa_recurrent_fwd_cpu(const GsaArgs& args);
GsaGrads gsa_recurrent_bwd_cpu(const GsaArgs& args, const at::Tensor& d_o, const at::Tensor& dhkt,
                               const at::Tensor& dhvt);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes of `args`. Its items name every tensor the variant stores, including "o", "hkt",
/// "hvt", "dq", "dk", "dv", "ds", "dg", "dhk0", "dhv0" for the observable results.
PrecisionContract gsa_contract(std::string_view variant, bool backward, const GsaArgs& args);

/// The arguments of a row call (q, k, v, s, g, hk0, hv0 and the common settings), and the
/// results by name, for the family's rows (gsa_rows.cpp).
GsaArgs gsa_args(const Call& call);
TensorMap results(const GsaFwd& f);
TensorMap results(const GsaGrads& g);

}  // namespace lav::kernels
