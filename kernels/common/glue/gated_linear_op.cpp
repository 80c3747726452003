// kernels/common/glue/gated_linear_op.cpp — torch glue of the gated linear CUDA kernels.
#include "common/glue/gated_linear_op.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

#include "common/glue/cuda_glue.h"
#include "core/error.h"

namespace lav::kernels {
namespace {

/// The problem of t, with o and ht allocated; `holder` keeps cu_seqlens on the device.
cuda::GatedLinearProblem problem(const GatedLinearTensors& t, at::Tensor& holder) {
    check_cuda_inputs("gated linear attention", {t.q, t.k, t.v, t.g, t.g_gamma, t.h0});
    cuda::GatedLinearProblem p;
    p.q = strided(t.q, t.layout);
    p.k = strided(t.k, t.layout);
    p.v = strided(t.v, t.layout);
    p.gate = t.gate;
    if (t.gate == cuda::Gate::per_head) p.g = strided_per_head(t.g, t.layout);
    if (t.gate == cuda::Gate::per_key) p.g = strided(t.g, t.layout);
    if (t.gate == cuda::Gate::constant) {
        LAV_CHECK(t.g_gamma.scalar_type() == at::kFloat && t.g_gamma.is_contiguous(),
                  "g_gamma must be a contiguous float32 [H] tensor");
        p.g_gamma = t.g_gamma.data_ptr<float>();
    }
    p.seqs = sequences(t.q, t.layout, t.cu_seqlens, holder);
    const bool first = t.layout == Layout::head_first;
    p.heads = int(t.q.size(first ? 1 : 2));
    p.dk = int(t.q.size(3));
    p.dv = int(t.v.size(3));
    LAV_CHECK(p.dk >= 1 && p.dk <= cuda::kMaxGatedLinearKeys, "key width ", p.dk,
              " is outside lav's CUDA kernels' 1..", cuda::kMaxGatedLinearKeys);
    p.scale = float(t.scale > 0 ? t.scale : 1.0 / std::sqrt(double(p.dk)));
    p.state = cuda_dtype(t.state_dtype);
    if (t.h0.defined()) {
        LAV_CHECK(t.h0.scalar_type() == t.state_dtype && t.h0.is_contiguous(),
                  "h0 must be a contiguous [N, H, K, V] tensor in the state dtype ",
                  c10::toString(t.state_dtype));
        p.h0 = t.h0.data_ptr();
    }
    return p;
}

/// The problem of the chunk variant.
cuda::GatedLinearProblem chunk_problem(const GatedLinearTensors& t, at::Tensor& holder) {
    cuda::GatedLinearProblem p = problem(t, holder);
    p.chunk = chunk_size_of(t.chunk_size);
    return p;
}

GatedLinearOut forward(const GatedLinearTensors& t, bool chunk) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    cuda::GatedLinearProblem p = chunk ? chunk_problem(t, holder) : problem(t, holder);
    const auto out_dtype =
        t.output_dtype == c10::ScalarType::Undefined ? t.q.scalar_type() : t.output_dtype;
    GatedLinearOut out;
    out.o = empty_like_layout(t.v, p.dv, out_dtype);
    out.ht = output({p.seqs.n, p.heads, p.dk, p.dv}, t.q.options().dtype(t.state_dtype));
    p.o = strided(out.o, t.layout);
    p.ht = out.ht.data_ptr();
    if (!chunk) {
        cuda::gated_linear_recurrent_fwd(p, current_stream());
        return out;
    }
    const at::Tensor workspace = at::empty({cuda::gated_linear_chunk_workspace_floats(p, false)},
                                           t.q.options().dtype(at::kFloat));
    cuda::gated_linear_chunk_fwd(p, workspace.data_ptr<float>(), current_stream());
    return out;
}

GatedLinearGradsOut backward(const GatedLinearTensors& t, const at::Tensor& d_o,
                             const at::Tensor& dht, bool chunk) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    const cuda::GatedLinearProblem p = chunk ? chunk_problem(t, holder) : problem(t, holder);
    check_cuda_inputs("gated linear attention backward", {t.q, d_o, dht});
    GatedLinearGradsOut out;
    out.dq = output(t.q.sizes(), t.q.options());
    out.dk = output(t.k.sizes(), t.k.options());
    out.dv = output(t.v.sizes(), t.v.options());
    cuda::GatedLinearGrads d;
    d.d_o = strided(d_o, t.layout);
    d.dq = strided(out.dq, t.layout);
    d.dk = strided(out.dk, t.layout);
    d.dv = strided(out.dv, t.layout);
    if (t.gate == cuda::Gate::per_head || t.gate == cuda::Gate::per_key) {
        out.dg = output(t.g.sizes(), t.g.options());
        d.dg = t.gate == cuda::Gate::per_head ? strided_per_head(out.dg, t.layout)
                                              : strided(out.dg, t.layout);
    }
    if (dht.defined()) {
        LAV_CHECK(dht.scalar_type() == t.state_dtype && dht.is_contiguous(),
                  "dht must be a contiguous [N, H, K, V] tensor in the state dtype");
        d.dht = dht.data_ptr();
    }
    if (t.h0.defined()) {
        out.dh0 = output(t.h0.sizes(), t.h0.options());
        d.dh0 = out.dh0.data_ptr();
    }
    const int64_t floats = chunk ? cuda::gated_linear_chunk_workspace_floats(p, true)
                                 : cuda::gated_linear_workspace_floats(p);
    const at::Tensor workspace = at::empty({floats}, t.q.options().dtype(at::kFloat));
    d.workspace = workspace.data_ptr<float>();
    if (chunk)
        cuda::gated_linear_chunk_bwd(p, d, current_stream());
    else
        cuda::gated_linear_recurrent_bwd(p, d, current_stream());
    return out;
}

}  // namespace

GatedLinearOut gated_linear_recurrent_fwd_cuda(const GatedLinearTensors& t) {
    return forward(t, /*chunk=*/false);
}

GatedLinearGradsOut gated_linear_recurrent_bwd_cuda(const GatedLinearTensors& t,
                                                    const at::Tensor& d_o, const at::Tensor& dht) {
    return backward(t, d_o, dht, /*chunk=*/false);
}

GatedLinearOut gated_linear_chunk_fwd_cuda(const GatedLinearTensors& t) {
    return forward(t, /*chunk=*/true);
}

GatedLinearGradsOut gated_linear_chunk_bwd_cuda(const GatedLinearTensors& t, const at::Tensor& d_o,
                                                const at::Tensor& dht) {
    return backward(t, d_o, dht, /*chunk=*/true);
}

}  // namespace lav::kernels
