// kernels/gated_delta_rule/gated_delta_rule_cpu.cpp — the gated delta rule on the CPU through
// LibTorch: chunk (WY form) and recurrent variants, forward and backward, GVA and FLA's in-kernel
// options. The algorithms are the shared engine of common/cpu/delta_chunk.h; not a reference.
#include "common/cpu/delta_chunk.h"
#include "gated_delta_rule/gated_delta_rule.h"

namespace lav::kernels {
namespace {

delta::Args engine_args(const GatedDeltaRuleArgs& a) {
    delta::Args e;
    e.family = "gated_delta_rule";
    e.q = a.q;
    e.k = a.k;
    e.v = a.v;
    e.g = a.g;
    e.beta = a.beta;
    e.A_log = a.A_log;
    e.dt_bias = a.dt_bias;
    e.h0 = a.h0;
    e.cu_seqlens = a.cu_seqlens;
    e.layout = a.layout;
    e.scale = a.scale;
    e.l2norm = a.use_qk_l2norm_in_kernel;
    e.gate_in_kernel = a.use_gate_in_kernel;
    e.beta_sigmoid = a.use_beta_sigmoid_in_kernel;
    e.allow_neg_eigval = a.allow_neg_eigval;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    e.keep_chunk_states = a.keep_chunk_states;
    return e;
}

GatedDeltaRuleFwd forward_of(const delta::Fwd& f) { return {f.o, f.ht, f.h}; }

GatedDeltaRuleGrads grads_of(const delta::Grads& g) {
    return {g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dA_log, g.ddt_bias, g.dh0};
}

}  // namespace

GatedDeltaRuleFwd gated_delta_rule_chunk_fwd_cpu(const GatedDeltaRuleArgs& args) {
    return forward_of(delta::chunk_fwd(engine_args(args)));
}

GatedDeltaRuleGrads gated_delta_rule_chunk_bwd_cpu(const GatedDeltaRuleArgs& args,
                                                   const at::Tensor& d_o, const at::Tensor& dht) {
    return grads_of(delta::chunk_bwd(engine_args(args), d_o, dht));
}

GatedDeltaRuleFwd gated_delta_rule_recurrent_fwd_cpu(const GatedDeltaRuleArgs& args) {
    return forward_of(delta::recurrent_fwd(engine_args(args)));
}

GatedDeltaRuleGrads gated_delta_rule_recurrent_bwd_cpu(const GatedDeltaRuleArgs& args,
                                                       const at::Tensor& d_o,
                                                       const at::Tensor& dht) {
    return grads_of(delta::recurrent_bwd(engine_args(args), d_o, dht));
}

}  // namespace lav::kernels
