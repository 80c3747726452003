// kernels/gla/gla_op.cpp — gla's CUDA backend: the gated linear kernels with a per-key gate,
// and its CUDA rows.
#include "common/cuda/gated_linear_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/gated_linear_op.h"
#include "common/rows.h"
#include "gla/gla.h"

namespace lav::kernels {
namespace {

GatedLinearTensors tensors(const GlaArgs& a) {
    GatedLinearTensors t;
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.g = a.g;
    t.gate = cuda::Gate::per_key;
    t.h0 = a.h0;
    t.cu_seqlens = a.cu_seqlens;
    t.layout = a.layout;
    t.scale = a.scale;
    t.state_dtype = a.state_dtype;
    t.output_dtype = a.output_dtype;
    t.chunk_size = a.chunk_size;
    return t;
}

}  // namespace

GlaFwd gla_recurrent_fwd_cuda(const GlaArgs& args) {
    const GatedLinearOut out = gated_linear_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

GlaGrads gla_recurrent_bwd_cuda(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const GatedLinearGradsOut g = gated_linear_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dh0};
}

GlaFwd gla_chunk_fwd_cuda(const GlaArgs& args) {
    const GatedLinearOut out = gated_linear_chunk_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

GlaGrads gla_chunk_bwd_cuda(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const GatedLinearGradsOut g = gated_linear_chunk_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dh0};
}

void add_gla_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<GlaArgs, GlaFwd, GlaGrads>(
        table, {"gla", "cuda", "cuda"}, gla_args, gla_contract,
        {{"chunk", gla_chunk_fwd_cuda, gla_chunk_bwd_cuda},
         {"recurrent", gla_recurrent_fwd_cuda, gla_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxGatedLinearKeys; });
}

}  // namespace lav::kernels
