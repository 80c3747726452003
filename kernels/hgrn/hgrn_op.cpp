// kernels/hgrn/hgrn_op.cpp — hgrn's CUDA backend: torch glue of hgrn.cu, and its CUDA rows.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include "common/glue/cuda_glue.h"
#include "common/rows.h"
#include "core/error.h"
#include "hgrn/hgrn.h"
#include "hgrn/hgrn_cuda.h"

namespace lav::kernels {
namespace {

cuda::HgrnProblem problem(const HgrnArgs& a, at::Tensor& holder) {
    check_cuda_inputs("hgrn", {a.x, a.g, a.h0});
    cuda::HgrnProblem p;
    p.x = strided(a.x, a.layout);
    p.g = strided(a.g, a.layout);
    p.seqs = sequences(a.x, a.layout, a.cu_seqlens, holder);
    p.heads = int(a.x.size(a.layout == Layout::head_first ? 1 : 2));
    p.width = int(a.x.size(3));
    p.state = cuda_dtype(a.state_dtype);
    if (a.h0.defined()) {
        LAV_CHECK(a.h0.scalar_type() == a.state_dtype && a.h0.is_contiguous(),
                  "h0 must be a contiguous [N, H, K] tensor in the state dtype");
        p.h0 = a.h0.data_ptr();
    }
    return p;
}

/// The problem of the chunked scan.
cuda::HgrnProblem chunk_problem(const HgrnArgs& a, at::Tensor& holder) {
    cuda::HgrnProblem p = problem(a, holder);
    p.chunk = chunk_size_of(a.chunk_size);
    return p;
}

HgrnFwd forward(const HgrnArgs& args, bool chunk) {
    const c10::cuda::CUDAGuard guard(args.x.device());
    at::Tensor holder;
    cuda::HgrnProblem p = chunk ? chunk_problem(args, holder) : problem(args, holder);
    const auto out_dtype =
        args.output_dtype == c10::ScalarType::Undefined ? args.x.scalar_type() : args.output_dtype;
    HgrnFwd out;
    out.o = empty_like_layout(args.x, p.width, out_dtype);
    out.ht = output({p.seqs.n, p.heads, p.width}, args.x.options().dtype(args.state_dtype));
    p.o = strided(out.o, args.layout);
    p.ht = out.ht.data_ptr();
    if (!chunk) {
        cuda::hgrn_recurrent_fwd(p, current_stream());
        return out;
    }
    const at::Tensor workspace = at::empty({cuda::hgrn_chunk_workspace_floats(p, false)},
                                           args.x.options().dtype(at::kFloat));
    cuda::hgrn_chunk_fwd(p, workspace.data_ptr<float>(), current_stream());
    return out;
}

HgrnGrads backward(const HgrnArgs& args, const at::Tensor& d_o, const at::Tensor& dht, bool chunk) {
    const c10::cuda::CUDAGuard guard(args.x.device());
    at::Tensor holder;
    const cuda::HgrnProblem p = chunk ? chunk_problem(args, holder) : problem(args, holder);
    check_cuda_inputs("hgrn backward", {args.x, d_o, dht});
    HgrnGrads out;
    out.dx = output(args.x.sizes(), args.x.options());
    out.dg = output(args.g.sizes(), args.g.options());
    cuda::HgrnGrads d;
    d.d_o = strided(d_o, args.layout);
    d.dx = strided(out.dx, args.layout);
    d.dg = strided(out.dg, args.layout);
    if (dht.defined()) {
        LAV_CHECK(dht.scalar_type() == args.state_dtype && dht.is_contiguous(),
                  "dht must be a contiguous [N, H, K] tensor in the state dtype");
        d.dht = dht.data_ptr();
    }
    if (args.h0.defined()) {
        out.dh0 = output(args.h0.sizes(), args.h0.options());
        d.dh0 = out.dh0.data_ptr();
    }
    const int64_t floats =
        chunk ? cuda::hgrn_chunk_workspace_floats(p, true) : cuda::hgrn_workspace_floats(p);
    const at::Tensor workspace = at::empty({floats}, args.x.options().dtype(at::kFloat));
    d.workspace = workspace.data_ptr<float>();
    if (chunk)
        cuda::hgrn_chunk_bwd(p, d, current_stream());
    else
        cuda::hgrn_recurrent_bwd(p, d, current_stream());
    return out;
}

}  // namespace

HgrnFwd hgrn_recurrent_fwd_cuda(const HgrnArgs& args) { return forward(args, false); }

HgrnGrads hgrn_recurrent_bwd_cuda(const HgrnArgs& args, const at::Tensor& d_o,
                                  const at::Tensor& dht) {
    return backward(args, d_o, dht, false);
}

HgrnFwd hgrn_chunk_fwd_cuda(const HgrnArgs& args) { return forward(args, true); }

HgrnGrads hgrn_chunk_bwd_cuda(const HgrnArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    return backward(args, d_o, dht, true);
}

void add_hgrn_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<HgrnArgs, HgrnFwd, HgrnGrads>(
        table, {"hgrn", "cuda", "cuda"}, hgrn_args, hgrn_contract,
        {{"chunk", hgrn_chunk_fwd_cuda, hgrn_chunk_bwd_cuda},
         {"recurrent", hgrn_recurrent_fwd_cuda, hgrn_recurrent_bwd_cuda}});
}

}  // namespace lav::kernels
