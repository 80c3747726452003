// kernels/mesa_net/mesa_net.h — MesaNet arguments, results, contracts.
//
// Per head, two states and one linear solve per step:
//   Hkk_t = exp(g_t) Hkk_{t-1} + β_t k_t k_tᵀ,     Hkv_t = exp(g_t) Hkv_{t-1} + β_t k_t v_tᵀ
//   x_t   = (Hkk_t + diag(λ))⁻¹ q_t  (conjugate gradient),   o_t = Hkv_tᵀ x_t
// No scale. The solve runs max_cg_iterations steps of FLA's conjugate gradient
// (fla/ops/mesa_net/chunk_cg_solver_fwd.py: x₀ = 0, 1e-5 guards in both divisions). Both
// layouts are read through strides; varlen batches pass cu_seqlens with B == 1.
//
//   MesaNetArgs args{q, k, v, g, beta, lamb};   // bf16 q, k, v; fp32 g, beta, lamb
//   args.max_cg_iterations = 64;
//   MesaNetFwd out = mesa_net_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct MesaNetArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]; input dtype
    at::Tensor g;           // [B, T, H] / [B, H, T] log decay
    at::Tensor beta;        // [B, T, H] / [B, H, T]
    at::Tensor lamb;        // [H, K] ridge λ
    at::Tensor h_kk0;       // [N, H, K, K]; undefined: zeros
    at::Tensor h_kv0;       // [N, H, K, V]; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch
    Layout layout = Layout::head_last;
    bool use_qk_l2norm_in_kernel = false;
    int64_t max_cg_iterations = 0;  // 0: K (FLA's tests use the head dim; its default is 30)
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk and final states, dh0s
    c10::ScalarType kk_dtype = c10::ScalarType::Undefined;      // Hkk's own; Undefined: state_dtype
    c10::ScalarType kv_dtype = c10::ScalarType::Undefined;      // Hkv's own; Undefined: state_dtype
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;

    c10::ScalarType kk_state() const { return own_or_state(kk_dtype); }
    c10::ScalarType kv_state() const { return own_or_state(kv_dtype); }

  private:
    c10::ScalarType own_or_state(c10::ScalarType own) const {
        return own == c10::ScalarType::Undefined ? state_dtype : own;
    }
};

struct MesaNetFwd {
    at::Tensor o;      // layout of v; output dtype
    at::Tensor ht_kk;  // [N, H, K, K]; Hkk's state dtype
    at::Tensor ht_kv;  // [N, H, K, V]; Hkv's state dtype
};

/// Gradients w.r.t. the tensors as passed (raw q, k with the in-kernel norm).
struct MesaNetGrads {
    at::Tensor dq, dk, dv;      // like q, k, v
    at::Tensor dg, dbeta;       // like g and beta
    at::Tensor dlamb;           // like lamb
    at::Tensor dh_kk0, dh_kv0;  // in Hkk's, Hkv's state dtype; undefined without h_kk0 / h_kv0
};

MesaNetFwd mesa_net_chunk_fwd_cpu(const MesaNetArgs& args);
/// d_o is like o, dht_kk and dht_kv like the final states (undefined: zeros). Recomputes the
/// chunk states and both solves (x, and y = A⁻ᵀ Hkv d_o) by conjugate gradient.
MesaNetGrads mesa_net_chunk_bwd_cpu(const MesaNetArgs& args, const at::Tensor& d_o,
                                    const at::Tensor& dht_kk, const at::Tensor& dht_kv);
MesaNetFwd mesa_net_recurrent_fwd_cpu(const MesaNetArgs& args);
MesaNetGrads mesa_net_recurrent_bwd_cpu(const MesaNetArgs& args, const at::Tensor& d_o,
                                        const at::Tensor& dht_kk, const at::Tensor& dht_kv);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward; its
/// items name every tensor the variant stores, the observable results ("o", "ht_kk",
/// "ht_kv", "dq", "dk", "dv", "dg", "dbeta", "dlamb", "dh_kk0", "dh_kv0") included.
PrecisionContract mesa_net_contract(std::string_view variant, bool backward,
                                    const MesaNetArgs& args);

/// The arguments of a row call (q, k, v, g, beta, lamb, h_kk0, h_kv0, the options and the
/// common settings), and the results by name, for the family's rows (mesa_net_rows.cpp).
MesaNetArgs mesa_net_args(const Call& call);
TensorMap results(const MesaNetFwd& f);
TensorMap results(const MesaNetGrads& g);

}  // namespace lav::kernels
