// kernels/delta_rule/delta_rule_cpu.cpp — the delta rule on the CPU through LibTorch: chunk (WY
// form) and recurrent variants, forward and backward. The algorithms are the gated delta rule
// engine of common/cpu/delta_chunk.h run without a gate; not a reference (see README.md).
#include "common/cpu/delta_chunk.h"
#include "delta_rule/delta_rule.h"

namespace lav::kernels {
namespace {

delta::Args engine_args(const DeltaRuleArgs& a) {
    delta::Args e;
    e.family = "delta_rule";
    e.q = a.q;
    e.k = a.k;
    e.v = a.v;
    e.beta = a.beta;
    e.h0 = a.h0;
    e.cu_seqlens = a.cu_seqlens;
    e.layout = a.layout;
    e.scale = a.scale;
    e.l2norm = a.use_qk_l2norm_in_kernel;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    e.keep_chunk_states = a.keep_chunk_states;
    return e;
}

DeltaRuleFwd forward_of(const delta::Fwd& f) { return {f.o, f.ht, f.h}; }

DeltaRuleGrads grads_of(const delta::Grads& g) { return {g.dq, g.dk, g.dv, g.dbeta, g.dh0}; }

}  // namespace

DeltaRuleFwd delta_rule_chunk_fwd_cpu(const DeltaRuleArgs& args) {
    return forward_of(delta::chunk_fwd(engine_args(args)));
}

DeltaRuleGrads delta_rule_chunk_bwd_cpu(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                        const at::Tensor& dht) {
    return grads_of(delta::chunk_bwd(engine_args(args), d_o, dht));
}

DeltaRuleFwd delta_rule_recurrent_fwd_cpu(const DeltaRuleArgs& args) {
    return forward_of(delta::recurrent_fwd(engine_args(args)));
}

DeltaRuleGrads delta_rule_recurrent_bwd_cpu(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                            const at::Tensor& dht) {
    return grads_of(delta::recurrent_bwd(engine_args(args), d_o, dht));
}

}  // namespace lav::kernels
