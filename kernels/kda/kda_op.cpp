// kernels/kda/kda_op.cpp — kda's CUDA backend: the recurrent delta rule kernels with a per-key
// gate, kda's chunk kernels (keys up to 128), and its CUDA rows.
#include "common/cuda/delta_recurrent_cuda.h"
#include "common/cuda/kda_chunk_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/delta_op.h"
#include "common/rows.h"
#include "kda/kda.h"

namespace lav::kernels {
namespace {

DeltaTensors tensors(const KdaArgs& a) {
    DeltaTensors t;
    t.family = "kda";
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.g = a.g;
    t.gate = cuda::DeltaGate::per_key;
    t.beta = a.beta;
    t.A_log = a.A_log;
    t.dt_bias = a.dt_bias;
    t.h0 = a.h0;
    t.cu_seqlens = a.cu_seqlens;
    t.layout = a.layout;
    t.scale = a.scale;
    t.l2norm = a.use_qk_l2norm_in_kernel;
    t.gate_in_kernel = a.use_gate_in_kernel;
    t.lower_bound = a.lower_bound;
    t.beta_sigmoid = a.use_beta_sigmoid_in_kernel;
    t.allow_neg_eigval = a.allow_neg_eigval;
    t.state_dtype = a.state_dtype;
    t.output_dtype = a.output_dtype;
    t.chunk_size = a.chunk_size;
    t.keep_chunk_states = a.keep_chunk_states;
    return t;
}

}  // namespace

KdaFwd kda_recurrent_fwd_cuda(const KdaArgs& args) {
    const DeltaOut out = delta_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

KdaGrads kda_recurrent_bwd_cuda(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const DeltaGradsOut g = delta_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dA_log, g.ddt_bias, g.dh0};
}

KdaFwd kda_chunk_fwd_cuda(const KdaArgs& args) {
    const DeltaOut out = delta_chunk_fwd_cuda(tensors(args));
    return {out.o, out.ht, out.h};
}

KdaGrads kda_chunk_bwd_cuda(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const DeltaGradsOut g = delta_chunk_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dA_log, g.ddt_bias, g.dh0};
}

void add_kda_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<KdaArgs, KdaFwd, KdaGrads>(
        table, {"kda", "cuda", "cuda"}, kda_args, kda_contract,
        {{"recurrent", kda_recurrent_fwd_cuda, kda_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxDeltaKeys; });
    add_rows<KdaArgs, KdaFwd, KdaGrads>(
        table, {"kda", "cuda", "cuda"}, kda_args, kda_contract,
        {{"chunk", kda_chunk_fwd_cuda, kda_chunk_bwd_cuda}}, [](const Call& c) {
            return c.dim("K") <= cuda::kMaxKdaChunkKeys && c.chunk_size <= cuda::kMaxDeltaChunk;
        });
}

}  // namespace lav::kernels
