// kernels/gated_delta_rule/gated_delta_rule_op.cpp — gated_delta_rule's CUDA backend: the delta
// rule kernels (recurrent, and chunk for keys up to 256) with a per-head gate, and its CUDA rows.
#include "common/cuda/delta_chunk_cuda.h"
#include "common/cuda/delta_recurrent_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/delta_op.h"
#include "common/rows.h"
#include "gated_delta_rule/gated_delta_rule.h"

namespace lav::kernels {
namespace {

DeltaTensors tensors(const GatedDeltaRuleArgs& a) {
    DeltaTensors t;
    t.family = "gated_delta_rule";
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.g = a.g;
    t.gate = a.g.defined() ? cuda::DeltaGate::per_head : cuda::DeltaGate::none;
    t.beta = a.beta;
    t.A_log = a.A_log;
    t.dt_bias = a.dt_bias;
    t.h0 = a.h0;
    t.cu_seqlens = a.cu_seqlens;
    t.layout = a.layout;
    t.scale = a.scale;
    t.l2norm = a.use_qk_l2norm_in_kernel;
    t.gate_in_kernel = a.use_gate_in_kernel;
    t.beta_sigmoid = a.use_beta_sigmoid_in_kernel;
    t.allow_neg_eigval = a.allow_neg_eigval;
    t.state_dtype = a.state_dtype;
    t.output_dtype = a.output_dtype;
    t.chunk_size = a.chunk_size;
    t.keep_chunk_states = a.keep_chunk_states;
    return t;
}

}  // namespace

GatedDeltaRuleFwd gated_delta_rule_recurrent_fwd_cuda(const GatedDeltaRuleArgs& args) {
    const DeltaOut out = delta_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

GatedDeltaRuleGrads gated_delta_rule_recurrent_bwd_cuda(const GatedDeltaRuleArgs& args,
                                                        const at::Tensor& d_o,
                                                        const at::Tensor& dht) {
    const DeltaGradsOut g = delta_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dA_log, g.ddt_bias, g.dh0};
}

GatedDeltaRuleFwd gated_delta_rule_chunk_fwd_cuda(const GatedDeltaRuleArgs& args) {
    const DeltaOut out = delta_chunk_fwd_cuda(tensors(args));
    return {out.o, out.ht, out.h};
}

GatedDeltaRuleGrads gated_delta_rule_chunk_bwd_cuda(const GatedDeltaRuleArgs& args,
                                                    const at::Tensor& d_o, const at::Tensor& dht) {
    const DeltaGradsOut g = delta_chunk_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dA_log, g.ddt_bias, g.dh0};
}

void add_gated_delta_rule_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<GatedDeltaRuleArgs, GatedDeltaRuleFwd, GatedDeltaRuleGrads>(
        table, {"gated_delta_rule", "cuda", "cuda"}, gated_delta_rule_args,
        gated_delta_rule_contract,
        {{"recurrent", gated_delta_rule_recurrent_fwd_cuda, gated_delta_rule_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxDeltaKeys; });
    add_rows<GatedDeltaRuleArgs, GatedDeltaRuleFwd, GatedDeltaRuleGrads>(
        table, {"gated_delta_rule", "cuda", "cuda"}, gated_delta_rule_args,
        gated_delta_rule_contract,
        {{"chunk", gated_delta_rule_chunk_fwd_cuda, gated_delta_rule_chunk_bwd_cuda}},
        [](const Call& c) {
            return c.dim("K") <= cuda::kMaxDeltaChunkKeys && c.chunk_size <= cuda::kMaxDeltaChunk;
        });
}

}  // namespace lav::kernels
