// kernels/common/glue/delta_op.h — torch glue of the delta rule CUDA kernels, shared by
// delta_rule, gated_delta_rule and kda (they differ only in the gate's shape): the recurrent
// forward and backward, and the chunk forward and backward (the delta rule's kernels without a
// gate or with one per head, kda's with one per key).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "common/cuda/delta_recurrent_cuda.h"
#include "core/layout.h"

namespace lav::kernels {

/// A family's arguments as the kernels take them; the families' own Args map onto it.
struct DeltaTensors {
    const char* family = "";  // for messages
    at::Tensor q, k;          // [B, T, H, K] / [B, H, T, K]
    at::Tensor v;             // [B, T, HV, V] / [B, HV, T, V]
    at::Tensor g;             // per_head [B, T, HV] or per_key like v with K, as `gate` says
    at::Tensor beta;          // [B, T, HV] / [B, HV, T]
    at::Tensor A_log;         // [HV]; with gate_in_kernel
    at::Tensor dt_bias;       // [HV] per_head, [HV * K] per_key; undefined: zeros
    at::Tensor h0;            // [N, HV, K, V] in the state dtype; undefined: zeros
    at::Tensor cu_seqlens;    // [N + 1] int64 or int32, any device; undefined: dense
    cuda::DeltaGate gate = cuda::DeltaGate::none;
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool l2norm = false;
    bool gate_in_kernel = false;
    std::optional<double> lower_bound;  // kda's sigmoid-bounded form of the in-kernel gate
    bool beta_sigmoid = false;
    bool allow_neg_eigval = false;
    c10::ScalarType state_dtype = c10::ScalarType::Float;
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // Undefined: q's dtype
    int64_t chunk_size = 64;                                    // chunk kernels only
    bool keep_chunk_states = false;                             // chunk forward: also h
};

struct DeltaOut {
    at::Tensor o, ht;
    at::Tensor h;  // chunk forward with keep_chunk_states: [NT, HV, K, V] in the state dtype
};

/// Gradients w.r.t. the tensors as passed; each undefined where its input is.
struct DeltaGradsOut {
    at::Tensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
};

DeltaOut delta_recurrent_fwd_cuda(const DeltaTensors& t);
/// d_o like o, dht like ht (undefined: zeros).
DeltaGradsOut delta_recurrent_bwd_cuda(const DeltaTensors& t, const at::Tensor& d_o,
                                       const at::Tensor& dht);
/// The chunk (WY) forward and backward: keys up to cuda::kMaxDeltaChunkKeys without a gate or
/// with one per head, up to cuda::kMaxKdaChunkKeys with one per key (kda's kernels).
DeltaOut delta_chunk_fwd_cuda(const DeltaTensors& t);
DeltaGradsOut delta_chunk_bwd_cuda(const DeltaTensors& t, const at::Tensor& d_o,
                                   const at::Tensor& dht);

}  // namespace lav::kernels
