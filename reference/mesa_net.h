// reference/mesa_net.h — float64 MesaNet: recurrence with an exact solve, backward, and the
// materialised form that checks it.
//
// Per head, with two states (both start from their initial values, zeros when absent):
//   Hkk_t = exp(g_t) Hkk_{t-1} + β_t k_t k_tᵀ,     Hkv_t = exp(g_t) Hkv_{t-1} + β_t k_t v_tᵀ
//   x_t   = (Hkk_t + diag(λ))⁻¹ q_t,               o_t   = Hkv_tᵀ x_t
// No scale (FLA's chunk_mesa_net has none). The solve is exact (LU in fp64), the ground truth
// that FLA's conjugate-gradient iterations approximate. use_qk_l2norm_in_kernel normalises q
// and k as x / sqrt(Σ x² + 1e-6). Every tensor is float64 and head_last; anything else is a
// harness bug and throws InternalError (reference/README.md, rule 1). Shares no code with kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::ref {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr double kMesaNetL2NormEps = 1e-6;

struct MesaNetInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, H, V] fp64
    at::Tensor g;                     // [B, T, H] fp64 log decay
    at::Tensor beta;                  // [B, T, H] fp64
    at::Tensor lamb;                  // [H, K] fp64 ridge λ (> 0 keeps the system regular)
    at::Tensor h_kk0;                 // [N, H, K, K] fp64; undefined: zeros
    at::Tensor h_kv0;                 // [N, H, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    bool use_qk_l2norm_in_kernel = false;
};

struct MesaNetOutputs {
    at::Tensor o;      // [B, T, H, V] fp64
    at::Tensor ht_kk;  // [N, H, K, K] fp64
    at::Tensor ht_kv;  // [N, H, K, V] fp64
};

/// Gradients w.r.t. the inputs as passed (raw q, k with the in-kernel norm).
struct MesaNetGrads {
    at::Tensor dq, dk, dv;  // like q, k, v
    at::Tensor dg, dbeta;   // [B, T, H]
    at::Tensor dlamb;       // [H, K]
    at::Tensor dh_kk0;      // [N, H, K, K]; undefined without h_kk0
    at::Tensor dh_kv0;      // [N, H, K, V]; undefined without h_kv0
};

/// The step-by-step recurrence, one exact solve per step.
MesaNetOutputs mesa_net_fwd(const MesaNetInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht_kk·dht_kk + Σ ht_kv·dht_kv (undefined cotangents: zeros)
/// by a reverse-time recurrence that recomputes both states from checkpoints every ⌈√L⌉
/// steps: memory O(H·K·(K + V)·√L) per sequence. With y_t = (Hkk_t + diag λ)⁻ᵀ Hkv_t d_o_t:
/// dq_t = y_t, ∂L/∂Hkk_t = −y_t x_tᵀ, ∂L/∂Hkv_t = x_t d_o_tᵀ, dλ = −Σ_t y_t ⊙ x_t.
MesaNetGrads mesa_net_bwd(const MesaNetInputs& in, const at::Tensor& d_o, const at::Tensor& dht_kk,
                          const at::Tensor& dht_kv);

/// An independent form for validating mesa_net_fwd: every state materialised from its closed
/// form, H_t = e^{G_t} H_0 + Σ_{s ≤ t} e^{G_t − G_s} β_s k_s (k_s or v_s)ᵀ with G the inclusive
/// cumsum of g along the sequence, then one batched solve for all steps. O(L·K·(K + V)) memory.
MesaNetOutputs mesa_net_fwd_materialised(const MesaNetInputs& in);

}  // namespace lav::ref
