// kernels/gated_delta_rule/gated_delta_rule_rows.cpp — gated_delta_rule's CPU rows, and the
// argument and result mapping of its rows.
#include "kernels/common/rows.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace lav::kernels {

GatedDeltaRuleArgs gated_delta_rule_args(const Call& call) {
    GatedDeltaRuleArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, beta, A_log, dt_bias, h0);
    LAV_FLAGS_FROM(a, call, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                   allow_neg_eigval);
    set_common_args(a, call);
    return a;
}

TensorMap results(const GatedDeltaRuleFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const GatedDeltaRuleGrads& g) {
    return LAV_NAMED(g, dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0);
}

void add_gated_delta_rule_cpu_rows(RowTable& table) {
    add_rows<GatedDeltaRuleArgs, GatedDeltaRuleFwd, GatedDeltaRuleGrads>(
        table, {"gated_delta_rule", "cpu", "cpu"}, gated_delta_rule_args, gated_delta_rule_contract,
        {{"chunk", gated_delta_rule_chunk_fwd_cpu, gated_delta_rule_chunk_bwd_cpu},
         {"recurrent", gated_delta_rule_recurrent_fwd_cpu, gated_delta_rule_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
