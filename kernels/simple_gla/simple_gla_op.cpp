// kernels/simple_gla/simple_gla_op.cpp — simple_gla's CUDA backend: the gated linear kernels
// with a per-head gate, a constant gate or none, and its CUDA rows.
#include "common/cuda/gated_linear_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/gated_linear_op.h"
#include "common/rows.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

GatedLinearTensors tensors(const SimpleGlaArgs& a) {
    GatedLinearTensors t;
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.g = a.g;
    t.g_gamma = a.g_gamma;
    t.gate = a.g.defined()         ? cuda::Gate::per_head
             : a.g_gamma.defined() ? cuda::Gate::constant
                                   : cuda::Gate::none;
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

SimpleGlaFwd simple_gla_recurrent_fwd_cuda(const SimpleGlaArgs& args) {
    const GatedLinearOut out = gated_linear_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

SimpleGlaGrads simple_gla_recurrent_bwd_cuda(const SimpleGlaArgs& args, const at::Tensor& d_o,
                                             const at::Tensor& dht) {
    const GatedLinearGradsOut g = gated_linear_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dh0};
}

SimpleGlaFwd simple_gla_chunk_fwd_cuda(const SimpleGlaArgs& args) {
    const GatedLinearOut out = gated_linear_chunk_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

SimpleGlaGrads simple_gla_chunk_bwd_cuda(const SimpleGlaArgs& args, const at::Tensor& d_o,
                                         const at::Tensor& dht) {
    const GatedLinearGradsOut g = gated_linear_chunk_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dh0};
}

void add_simple_gla_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<SimpleGlaArgs, SimpleGlaFwd, SimpleGlaGrads>(
        table, {"simple_gla", "cuda", "cuda"}, simple_gla_args, simple_gla_contract,
        {{"chunk", simple_gla_chunk_fwd_cuda, simple_gla_chunk_bwd_cuda},
         {"recurrent", simple_gla_recurrent_fwd_cuda, simple_gla_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxGatedLinearKeys; });
}

}  // namespace lav::kernels
