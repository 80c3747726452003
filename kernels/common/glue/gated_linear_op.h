// kernels/common/glue/gated_linear_op.h — torch glue of the gated linear CUDA kernels, shared by
// the simple_gla and gla families (they differ only in the gate's shape).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cuda/gated_linear_cuda.h"
#include "core/layout.h"

namespace lav::kernels {

struct GatedLinearTensors {
    at::Tensor q, k, v;
    at::Tensor g;        // per-head [B, T, H] or per-key like k, as `gate` says
    at::Tensor g_gamma;  // [H], Gate::constant
    at::Tensor h0;
    at::Tensor cu_seqlens;
    cuda::Gate gate = cuda::Gate::none;
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    c10::ScalarType state_dtype = c10::ScalarType::Float;
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;
    int64_t chunk_size = 64;  // chunk variant only
};

struct GatedLinearOut {
    at::Tensor o, ht;
};

struct GatedLinearGradsOut {
    at::Tensor dq, dk, dv, dg, dh0;  // dg undefined without a per-step gate, dh0 without h0
};

GatedLinearOut gated_linear_recurrent_fwd_cuda(const GatedLinearTensors& t);
GatedLinearGradsOut gated_linear_recurrent_bwd_cuda(const GatedLinearTensors& t,
                                                    const at::Tensor& d_o, const at::Tensor& dht);
GatedLinearOut gated_linear_chunk_fwd_cuda(const GatedLinearTensors& t);
GatedLinearGradsOut gated_linear_chunk_bwd_cuda(const GatedLinearTensors& t, const at::Tensor& d_o,
                                                const at::Tensor& dht);

}  // namespace lav::kernels
