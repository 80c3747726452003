// kernels/kda/kda.h — KDA (Kimi Delta Attention) arguments, results and precision contracts.
//
// KDA is the gated delta rule with a per-key-dimension decay. Per value head:
//   S̄_t = diag(exp(g_t)) S_{t-1},   u_t = β_t (v_t − S̄_tᵀ k_t),
//   S_t = S̄_t + k_t u_tᵀ,            o_t = scale · S_tᵀ q_t
// q, k have H heads; v, g, β and the state have HV = G·H value heads (GVA), and value head hv
// reads key head hv / G. The options are FLA's chunk_kda flags: an in-kernel l2norm of q and k,
// an in-kernel gate (g raw, with A_log [HV] and dt_bias [HV·K]; softplus or lower-bound form),
// and an in-kernel sigmoid of β (×2 with allow_neg_eigval). Both layouts are read through
// strides: q is [B, T, H, K] (head_last) or [B, H, T, K] (head_first). Varlen batches pass
// cu_seqlens with B == 1. README.md has the math, the chunk form and the contracts.
//
//   KdaArgs args{q, k, v, g, beta};   // bf16 q, k, v; fp32 g, beta
//   args.use_qk_l2norm_in_kernel = true;
//   args.state_dtype = at::kFloat;
//   KdaFwd out = kda_chunk_fwd_cpu(args);
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>

#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/row.h"

namespace lav::kernels {

struct KdaArgs {
    at::Tensor q;           // [B, T, H, K] head_last or [B, H, T, K] head_first; input dtype
    at::Tensor k;           // like q
    at::Tensor v;           // [B, T, HV, V] / [B, HV, T, V]; input dtype
    at::Tensor g;           // [B, T, HV, K] / [B, HV, T, K] log decay (raw with the gate option)
    at::Tensor beta;        // [B, T, HV] / [B, HV, T] (a logit with the sigmoid option)
    at::Tensor A_log;       // [HV]; needed with use_gate_in_kernel
    at::Tensor dt_bias;     // [HV * K]; undefined: zeros
    at::Tensor h0;          // [N, HV, K, V] initial state; undefined: zeros
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense batch of B sequences
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool use_qk_l2norm_in_kernel = false;
    bool use_gate_in_kernel = false;
    std::optional<double> lower_bound;  // with use_gate_in_kernel: the sigmoid-bounded gate
    bool use_beta_sigmoid_in_kernel = false;
    bool allow_neg_eigval = false;                              // needs use_beta_sigmoid_in_kernel
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // chunk states, ht, dh0
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // o; Undefined: q's dtype
    int64_t chunk_size = 64;
    /// the chunk forward also returns its stored chunk states (for comparison, not for speed)
    bool keep_chunk_states = false;
};

struct KdaFwd {
    at::Tensor o;   // layout and shape of v; output dtype
    at::Tensor ht;  // [N, HV, K, V]; state dtype
    /// [NT, HV, K, V] in the state dtype: the state before each chunk as the output pass reads
    /// it (FLA's h), chunks numbered by chunk_index(); chunk forward with keep_chunk_states only
    at::Tensor h;
};

struct KdaGrads {
    at::Tensor dq, dk, dv;  // like q, k, v (layout and dtype)
    at::Tensor dg;          // like g: w.r.t. the raw gate with use_gate_in_kernel
    at::Tensor dbeta;       // like beta: w.r.t. the logit with use_beta_sigmoid_in_kernel
    at::Tensor dA_log;      // like A_log; only with use_gate_in_kernel
    at::Tensor ddt_bias;    // like dt_bias; only with use_gate_in_kernel and dt_bias
    at::Tensor dh0;         // like h0 but in the state dtype; undefined without h0
};

KdaFwd kda_chunk_fwd_cpu(const KdaArgs& args);
/// d_o is like o, dht like ht (undefined: zeros). Recomputes the chunk states, w, u and v_new;
/// saves nothing from the forward.
KdaGrads kda_chunk_bwd_cpu(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);
KdaFwd kda_recurrent_fwd_cpu(const KdaArgs& args);
KdaGrads kda_recurrent_bwd_cpu(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);

/// The CUDA backend (builds with CUDA only; recurrent variant): the tensors of `args` on one
/// CUDA device, cu_seqlens int32 or int64 on any device; results on that device.
KdaFwd kda_recurrent_fwd_cuda(const KdaArgs& args);
KdaGrads kda_recurrent_bwd_cuda(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht);

/// The precision contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for
/// the dtypes and options of `args`. Its items name every tensor the variant stores, including
/// "o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0" for the observable
/// results (each only where the variant returns it).
PrecisionContract kda_contract(std::string_view variant, bool backward, const KdaArgs& args);

/// The arguments of a row call (q, k, v, g, beta, A_log, dt_bias, h0, the options and the
/// common settings), and the results by name, for the rows of every backend (kda_rows.cpp).
KdaArgs kda_args(const Call& call);
TensorMap results(const KdaFwd& f);
TensorMap results(const KdaGrads& g);

}  // namespace lav::kernels
