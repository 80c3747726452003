// reference/kda.h — float64 reference for KDA (Kimi Delta Attention): the recurrence, forward and
// backward, and a chunked form that checks it. Not a kernel; shares no code with kernels/.
//
// Per value head, with a per-key-dimension log decay g_t ∈ R^K:
//   S̄_t = diag(exp(g_t)) · S_{t-1}
//   u_t = β_t · (v_t − S̄_tᵀ k_t),   S_t = S̄_t + k_t u_tᵀ,   o_t = scale · S_tᵀ q_t
// (S_{-1} = h0). q, k have H heads and v, g, β, the state have HV = G·H value heads (GVA);
// value head hv reads key head hv / G. Options, as FLA's chunk_kda names them:
//   use_qk_l2norm_in_kernel:    q, k ← x / sqrt(Σ x² + 1e-6) per head
//   use_gate_in_kernel:         g is raw: g ← −exp(A_log[hv]) · softplus(g + dt_bias[hv, :]),
//                               or with lower_bound = lb < 0:
//                               g ← lb · sigmoid(exp(A_log[hv]) · (g + dt_bias[hv, :]))
//   use_beta_sigmoid_in_kernel: β is a logit: β ← sigmoid(β), times 2 with allow_neg_eigval
// Every tensor is float64 and head_last; a tensor of any other dtype is a harness bug and
// throws InternalError (reference/README.md, rule 1).
//
//   KdaInputs in;  in.q = q; in.k = k; in.v = v; in.g = g; in.beta = beta;   // fp64
//   KdaOutputs out = kda_fwd(in);
//   KdaGrads grads = kda_bwd(in, d_o, dht);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace lav::ref {

struct KdaInputs {
    at::Tensor q;                     // [B, T, H, K] fp64
    at::Tensor k;                     // [B, T, H, K] fp64
    at::Tensor v;                     // [B, T, HV, V] fp64
    at::Tensor g;                     // [B, T, HV, K] fp64 log decay (raw with the gate option)
    at::Tensor beta;                  // [B, T, HV] fp64 (a logit with the sigmoid option)
    at::Tensor A_log;                 // [HV] fp64; needed with use_gate_in_kernel
    at::Tensor dt_bias;               // [HV * K] fp64; undefined: zeros
    at::Tensor h0;                    // [N, HV, K, V] fp64; undefined: zeros
    std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: dense batch (N = B)
    double scale = 0.0;               // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    bool use_gate_in_kernel = false;
    std::optional<double> lower_bound;  // with use_gate_in_kernel: the sigmoid-bounded gate
    bool use_beta_sigmoid_in_kernel = false;
    bool allow_neg_eigval = false;  // needs use_beta_sigmoid_in_kernel
    int64_t state_stride = 0;       // > 0: the forward also returns states (below)
};

struct KdaOutputs {
    at::Tensor o;   // [B, T, HV, V] fp64
    at::Tensor ht;  // [N, HV, K, V] fp64
    /// [NT, HV, K, V] fp64: the state before positions 0, state_stride, 2·state_stride, ... of
    /// each sequence, sequence after sequence (chunk boundaries); with state_stride > 0 only
    at::Tensor states;
};

struct KdaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (dq, dk summed over each key head's value heads)
    at::Tensor dg;          // like g: w.r.t. the raw gate with use_gate_in_kernel
    at::Tensor dbeta;       // like beta: w.r.t. the logit with use_beta_sigmoid_in_kernel
    at::Tensor dA_log;      // [HV]; only with use_gate_in_kernel
    at::Tensor ddt_bias;    // [HV * K]; only with use_gate_in_kernel and dt_bias
    at::Tensor dh0;         // [N, HV, K, V]; undefined without h0
};

/// The step-by-step recurrence.
KdaOutputs kda_fwd(const KdaInputs& in);

/// Gradients of L = Σ o·d_o + Σ ht·dht (dht undefined: zeros) by a reverse-time recurrence that
/// recomputes states from checkpoints every ⌈√L⌉ steps: memory O(HV·K·V·√L) per sequence.
KdaGrads kda_bwd(const KdaInputs& in, const at::Tensor& d_o, const at::Tensor& dht);

/// An independent form for validating kda_fwd: chunks of `chunk_size` rows in the WY form with
/// the exact inverse (I + A_kk)^-1 from a triangular solve (reference/kda.md derives it).
KdaOutputs kda_fwd_chunked(const KdaInputs& in, int64_t chunk_size);

}  // namespace lav::ref
