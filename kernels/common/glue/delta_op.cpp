// kernels/common/glue/delta_op.cpp — torch glue of the delta rule CUDA kernels: checks
// the arguments as the CPU backends do, allocates the results, sums the in-kernel gate's
// per-step gradient terms and numbers the chunk forward's kept states.
#include "common/glue/delta_op.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/cuda/delta_chunk_cuda.h"
#include "common/cuda/kda_chunk_cuda.h"
#include "common/glue/cuda_glue.h"
#include "core/error.h"

namespace lav::kernels {
namespace {

/// The sizes of a [B, T, heads(, D)] tensor in `layout`.
std::vector<int64_t> in_layout(Layout layout, int64_t B, int64_t T, int64_t heads, int64_t D = -1) {
    std::vector<int64_t> s = layout == Layout::head_first ? std::vector<int64_t>{B, heads, T}
                                                          : std::vector<int64_t>{B, T, heads};
    if (D >= 0) s.push_back(D);
    return s;
}

/// The sequences' lengths: B of T for a dense batch, else the steps of cu_seqlens, which is
/// checked to run from 0 to T without decreasing (as core/varlen.cpp checks it).
std::vector<int64_t> lengths(const DeltaTensors& t, int64_t B, int64_t T) {
    if (!t.cu_seqlens.defined()) return std::vector<int64_t>(B, T);
    const at::Tensor cu = t.cu_seqlens.to(at::kCPU, at::kLong).contiguous();
    const int64_t n = cu.numel();
    const int64_t* c = cu.data_ptr<int64_t>();
    LAV_CHECK(n >= 2 && c[0] == 0 && c[n - 1] == T, t.family,
              " cuda: cu_seqlens must run from 0 to T = ", T);
    std::vector<int64_t> out;
    for (int64_t i = 0; i + 1 < n; ++i) {
        LAV_CHECK(c[i + 1] >= c[i], t.family, " cuda: cu_seqlens must not decrease");
        out.push_back(c[i + 1] - c[i]);
    }
    return out;
}

/// A per-head parameter as a contiguous fp32 copy of `numel` elements, kept alive in `keep`.
const float* parameter(const DeltaTensors& t, const at::Tensor& x, const char* name, int64_t numel,
                       std::vector<at::Tensor>& keep) {
    LAV_CHECK(x.numel() == numel, t.family, " cuda: ", name, " must have ", numel,
              " elements, got ", x.sizes());
    keep.push_back(x.to(at::kFloat).contiguous());
    return keep.back().data_ptr<float>();
}

/// The problem of t; `holder` keeps cu_seqlens on the device and `keep` the fp32 parameters.
cuda::DeltaProblem problem(const DeltaTensors& t, at::Tensor& holder,
                           std::vector<at::Tensor>& keep) {
    check_cuda_inputs(t.family, {t.q, t.k, t.v, t.g, t.beta, t.A_log, t.dt_bias, t.h0});
    LAV_CHECK(t.q.defined() && t.k.defined() && t.v.defined() && t.beta.defined(), t.family,
              " cuda needs q, k, v and beta");
    LAV_CHECK(t.k.scalar_type() == t.q.scalar_type() && t.v.scalar_type() == t.q.scalar_type(),
              t.family, " cuda: q, k and v must share one dtype");
    cuda::DeltaProblem p;
    p.q = strided(t.q, t.layout);
    p.k = strided(t.k, t.layout);
    p.v = strided(t.v, t.layout);
    const bool first = t.layout == Layout::head_first;
    const int64_t B = t.q.size(0), T = t.q.size(first ? 2 : 1);
    const int64_t H = t.q.size(first ? 1 : 2), K = t.q.size(3);
    const int64_t HV = t.v.size(first ? 1 : 2), V = t.v.size(3);
    LAV_CHECK(t.k.sizes() == t.q.sizes(), t.family, " cuda: k must have q's shape ", t.q.sizes(),
              ", got ", t.k.sizes());
    LAV_CHECK(t.v.sizes() == at::IntArrayRef(in_layout(t.layout, B, T, HV, V)), t.family,
              " cuda: v must agree with q in B and T, got ", t.v.sizes(), " and ", t.q.sizes());
    LAV_CHECK(H > 0 && HV > 0 && HV % H == 0, t.family, " cuda: v's heads (HV = ", HV,
              ") must be a positive multiple of q's heads (H = ", H, ")");
    LAV_CHECK(K >= 1 && K <= cuda::kMaxDeltaKeys && V >= 1, t.family, " cuda: key width ", K,
              " is outside 1..", cuda::kMaxDeltaKeys, " or V = ", V, " is not positive");
    LAV_CHECK(t.beta.sizes() == at::IntArrayRef(in_layout(t.layout, B, T, HV)), t.family,
              " cuda: beta must match v's B, T and heads in the same layout, got ", t.beta.sizes());
    p.beta = strided_per_head(t.beta, t.layout);
    p.gate = t.gate;
    if (t.gate != cuda::DeltaGate::none) {
        const bool per_key = t.gate == cuda::DeltaGate::per_key;
        LAV_CHECK(t.g.defined() && t.g.sizes() == at::IntArrayRef(in_layout(t.layout, B, T, HV,
                                                                            per_key ? K : -1)),
                  t.family, " cuda: g must be ", per_key ? "[B, T, HV, K]" : "[B, T, HV]",
                  " in the layout of v, got ", t.g.defined() ? t.g.sizes() : at::IntArrayRef{});
        p.g = per_key ? strided(t.g, t.layout) : strided_per_head(t.g, t.layout);
    }
    p.gate_in_kernel = t.gate_in_kernel;
    if (t.gate_in_kernel) {
        LAV_CHECK(t.gate != cuda::DeltaGate::none && t.A_log.defined(), t.family,
                  " cuda: use_gate_in_kernel needs g (the raw gate) and A_log");
        p.A_log = parameter(t, t.A_log, "A_log", HV, keep);
        if (t.dt_bias.defined())
            p.dt_bias = parameter(t, t.dt_bias, "dt_bias",
                                  t.gate == cuda::DeltaGate::per_key ? HV * K : HV, keep);
    } else {
        LAV_CHECK(!t.A_log.defined() && !t.dt_bias.defined(), t.family,
                  " cuda: A_log and dt_bias are read only with use_gate_in_kernel");
    }
    if (t.lower_bound) {
        LAV_CHECK(t.gate_in_kernel && *t.lower_bound < 0.0 && std::isfinite(*t.lower_bound),
                  t.family,
                  " cuda: lower_bound needs use_gate_in_kernel and must be negative, got ",
                  *t.lower_bound);
        p.lower_bound_form = true;
        p.lower_bound = static_cast<float>(*t.lower_bound);
    }
    LAV_CHECK(!t.allow_neg_eigval || t.beta_sigmoid, t.family,
              " cuda: allow_neg_eigval needs use_beta_sigmoid_in_kernel");
    p.beta_sigmoid = t.beta_sigmoid;
    p.beta_scale = t.allow_neg_eigval ? 2.f : 1.f;
    p.l2norm = t.l2norm;
    p.seqs = sequences(t.q, t.layout, t.cu_seqlens, holder);
    const std::vector<int64_t> steps = lengths(t, B, T);
    p.segment = cuda::delta_recurrent_segment(
        steps.empty() ? 0 : *std::max_element(steps.begin(), steps.end()));
    p.heads = int(H);
    p.value_heads = int(HV);
    p.dk = int(K);
    p.dv = int(V);
    LAV_CHECK(std::isfinite(t.scale), t.family, " cuda: scale must be finite, got ", t.scale);
    p.scale = static_cast<float>(t.scale != 0.0 ? t.scale : 1.0 / std::sqrt(double(K)));
    p.state = cuda_dtype(t.state_dtype);
    if (t.h0.defined()) {
        LAV_CHECK(t.h0.scalar_type() == t.state_dtype && t.h0.is_contiguous() &&
                      t.h0.sizes() == at::IntArrayRef({p.seqs.n, HV, K, V}),
                  t.family,
                  " cuda: h0 must be a contiguous [N, HV, K, V] tensor in the state dtype ",
                  c10::toString(t.state_dtype));
        p.h0 = t.h0.data_ptr();
    }
    return p;
}

/// The problem of t for the chunk kernels: the delta rule's (no gate or one per head, keys up to
/// cuda::kMaxDeltaChunkKeys) or kda's (a gate per key, keys up to cuda::kMaxKdaChunkKeys).
cuda::DeltaChunkProblem chunk_problem(const DeltaTensors& t, at::Tensor& holder,
                                      std::vector<at::Tensor>& keep) {
    cuda::DeltaChunkProblem p;
    static_cast<cuda::DeltaProblem&>(p) = problem(t, holder, keep);
    p.chunk = chunk_size_of(t.chunk_size);
    const int keys =
        p.gate == cuda::DeltaGate::per_key ? cuda::kMaxKdaChunkKeys : cuda::kMaxDeltaChunkKeys;
    LAV_CHECK(p.dk <= keys, t.family, " cuda: the chunk kernels take keys up to ", keys, ", got ",
              p.dk, "; wider keys run on the CPU row");
    LAV_CHECK(p.chunk <= cuda::kMaxDeltaChunk, t.family,
              " cuda: the chunk kernels take chunks up to ", cuda::kMaxDeltaChunk, ", got ",
              p.chunk);
    return p;
}

/// Allocates o and ht in p.
DeltaOut forward_outputs(const DeltaTensors& t, cuda::DeltaProblem& p) {
    const auto out_dtype =
        t.output_dtype == c10::ScalarType::Undefined ? t.q.scalar_type() : t.output_dtype;
    DeltaOut out;
    out.o = empty_like_layout(t.v, p.dv, out_dtype);
    out.ht = output({p.seqs.n, p.value_heads, p.dk, p.dv}, t.q.options().dtype(t.state_dtype));
    p.o = strided(out.o, t.layout);
    p.ht = out.ht.data_ptr();
    return out;
}

/// Either variant's backward: allocates the gradients, runs `run(d)` on a scratch of `floats`
/// fp32 elements and sums the in-kernel gate's per-row terms where `terms` says they lie.
template <class Run>
DeltaGradsOut backward(const DeltaTensors& t, const cuda::DeltaProblem& p, const at::Tensor& d_o,
                       const at::Tensor& dht, int64_t floats, const cuda::DeltaGateTerms& terms,
                       Run run) {
    check_cuda_inputs(t.family, {t.q, d_o, dht});
    LAV_CHECK(d_o.defined() && d_o.sizes() == t.v.sizes(), t.family,
              " cuda: d_o must have o's shape ", t.v.sizes());
    DeltaGradsOut out;
    out.dq = output(t.q.sizes(), t.q.options());
    out.dk = output(t.k.sizes(), t.k.options());
    out.dv = output(t.v.sizes(), t.v.options());
    out.dbeta = output(t.beta.sizes(), t.beta.options());
    cuda::DeltaGrads d;
    d.d_o = strided(d_o, t.layout);
    d.dq = strided(out.dq, t.layout);
    d.dk = strided(out.dk, t.layout);
    d.dv = strided(out.dv, t.layout);
    d.dbeta = strided_per_head(out.dbeta, t.layout);
    if (t.gate != cuda::DeltaGate::none) {
        out.dg = output(t.g.sizes(), t.g.options());
        d.dg = t.gate == cuda::DeltaGate::per_key ? strided(out.dg, t.layout)
                                                  : strided_per_head(out.dg, t.layout);
    }
    if (dht.defined()) {
        LAV_CHECK(dht.scalar_type() == t.state_dtype && dht.is_contiguous() &&
                      dht.sizes() == at::IntArrayRef({p.seqs.n, p.value_heads, p.dk, p.dv}),
                  t.family,
                  " cuda: dht must be a contiguous [N, HV, K, V] tensor in the state dtype");
        d.dht = dht.data_ptr();
    }
    if (t.h0.defined()) {
        out.dh0 = output(t.h0.sizes(), t.h0.options());
        d.dh0 = out.dh0.data_ptr();
    }
    const at::Tensor workspace = at::empty({floats}, t.q.options().dtype(at::kFloat));
    d.workspace = workspace.data_ptr<float>();
    run(d);
    if (t.gate_in_kernel) {
        // the per-step terms summed over every row in fp32, rounded once (the CPU backends sum
        // per sequence, then over the sequences)
        const auto summed = [&](int64_t offset, int64_t width, const at::Tensor& like) {
            return workspace.narrow(0, offset, terms.rows * p.value_heads * width)
                .view({terms.rows, p.value_heads * width})
                .sum(0)
                .to(like.scalar_type())
                .view(like.sizes());
        };
        out.dA_log = summed(terms.dA_log, 1, t.A_log);
        if (t.dt_bias.defined()) out.ddt_bias = summed(terms.ddt_bias, terms.width, t.dt_bias);
    }
    return out;
}

}  // namespace

DeltaOut delta_recurrent_fwd_cuda(const DeltaTensors& t) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    std::vector<at::Tensor> keep;
    cuda::DeltaProblem p = problem(t, holder, keep);
    const DeltaOut out = forward_outputs(t, p);
    cuda::delta_recurrent_fwd(p, current_stream());
    return out;
}

DeltaOut delta_chunk_fwd_cuda(const DeltaTensors& t) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    std::vector<at::Tensor> keep;
    cuda::DeltaChunkProblem p = chunk_problem(t, holder, keep);
    DeltaOut out = forward_outputs(t, p);
    at::Tensor first;
    if (t.keep_chunk_states) {
        // chunks numbered sequence after sequence, as core/varlen.h's chunk_index() numbers them
        const std::vector<int64_t> steps = lengths(t, t.q.size(0), p.seqs.t);
        std::vector<int64_t> starts;
        int64_t total = 0;
        for (const int64_t len : steps) {
            starts.push_back(total);
            total += (len + p.chunk - 1) / p.chunk;
        }
        first = at::tensor(starts, at::kLong).to(t.q.device());
        out.h = output({total, p.value_heads, p.dk, p.dv}, t.q.options().dtype(t.state_dtype));
        p.h = out.h.data_ptr();
        p.first_chunk = first.data_ptr<int64_t>();
    }
    const bool per_key = p.gate == cuda::DeltaGate::per_key;
    const at::Tensor workspace = at::empty({per_key ? cuda::kda_chunk_fwd_workspace_floats(p)
                                                    : cuda::delta_chunk_fwd_workspace_floats(p)},
                                           t.q.options().dtype(at::kFloat));
    if (per_key)
        cuda::kda_chunk_fwd(p, workspace.data_ptr<float>(), current_stream());
    else
        cuda::delta_chunk_fwd(p, workspace.data_ptr<float>(), current_stream());
    return out;
}

DeltaGradsOut delta_recurrent_bwd_cuda(const DeltaTensors& t, const at::Tensor& d_o,
                                       const at::Tensor& dht) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    std::vector<at::Tensor> keep;
    const cuda::DeltaProblem p = problem(t, holder, keep);
    return backward(
        t, p, d_o, dht, cuda::delta_recurrent_workspace_floats(p), cuda::delta_recurrent_terms(p),
        [&](const cuda::DeltaGrads& d) { cuda::delta_recurrent_bwd(p, d, current_stream()); });
}

DeltaGradsOut delta_chunk_bwd_cuda(const DeltaTensors& t, const at::Tensor& d_o,
                                   const at::Tensor& dht) {
    const c10::cuda::CUDAGuard guard(t.q.device());
    at::Tensor holder;
    std::vector<at::Tensor> keep;
    const cuda::DeltaChunkProblem p = chunk_problem(t, holder, keep);
    if (p.gate == cuda::DeltaGate::per_key)
        return backward(
            t, p, d_o, dht, cuda::kda_chunk_workspace_floats(p), cuda::kda_chunk_terms(p),
            [&](const cuda::DeltaGrads& d) { cuda::kda_chunk_bwd(p, d, current_stream()); });
    return backward(
        t, p, d_o, dht, cuda::delta_chunk_workspace_floats(p), cuda::delta_chunk_terms(p),
        [&](const cuda::DeltaGrads& d) { cuda::delta_chunk_bwd(p, d, current_stream()); });
}

}  // namespace lav::kernels
