// kernels/delta_rule/delta_rule_op.cpp — delta_rule's CUDA backend: the delta rule kernels
// (recurrent, and chunk for keys up to 256) without a gate, and its CUDA rows.
#include "common/cuda/delta_chunk_cuda.h"
#include "common/cuda/delta_recurrent_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/delta_op.h"
#include "common/rows.h"
#include "delta_rule/delta_rule.h"

namespace lav::kernels {
namespace {

DeltaTensors tensors(const DeltaRuleArgs& a) {
    DeltaTensors t;
    t.family = "delta_rule";
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.beta = a.beta;
    t.h0 = a.h0;
    t.cu_seqlens = a.cu_seqlens;
    t.layout = a.layout;
    t.scale = a.scale;
    t.l2norm = a.use_qk_l2norm_in_kernel;
    t.state_dtype = a.state_dtype;
    t.output_dtype = a.output_dtype;
    t.chunk_size = a.chunk_size;
    t.keep_chunk_states = a.keep_chunk_states;
    return t;
}

}  // namespace

DeltaRuleFwd delta_rule_recurrent_fwd_cuda(const DeltaRuleArgs& args) {
    const DeltaOut out = delta_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

DeltaRuleGrads delta_rule_recurrent_bwd_cuda(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                             const at::Tensor& dht) {
    const DeltaGradsOut g = delta_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dbeta, g.dh0};
}

DeltaRuleFwd delta_rule_chunk_fwd_cuda(const DeltaRuleArgs& args) {
    const DeltaOut out = delta_chunk_fwd_cuda(tensors(args));
    return {out.o, out.ht, out.h};
}

DeltaRuleGrads delta_rule_chunk_bwd_cuda(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                         const at::Tensor& dht) {
    const DeltaGradsOut g = delta_chunk_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dbeta, g.dh0};
}

void add_delta_rule_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<DeltaRuleArgs, DeltaRuleFwd, DeltaRuleGrads>(
        table, {"delta_rule", "cuda", "cuda"}, delta_rule_args, delta_rule_contract,
        {{"recurrent", delta_rule_recurrent_fwd_cuda, delta_rule_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxDeltaKeys; });
    add_rows<DeltaRuleArgs, DeltaRuleFwd, DeltaRuleGrads>(
        table, {"delta_rule", "cuda", "cuda"}, delta_rule_args, delta_rule_contract,
        {{"chunk", delta_rule_chunk_fwd_cuda, delta_rule_chunk_bwd_cuda}}, [](const Call& c) {
            return c.dim("K") <= cuda::kMaxDeltaChunkKeys && c.chunk_size <= cuda::kMaxDeltaChunk;
        });
}

}  // namespace lav::kernels
