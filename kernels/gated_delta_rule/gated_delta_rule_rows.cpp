// kernels/gated_delta_rule/gated_delta_rule_rows.cpp — gated_delta_rule's CPU rows, and the
// argument and result mapping of its rows.
#include "kernels/common/rows.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace lav::kernels {

GatedDeltaRuleArgs gated_delta_rule_args(const Call& call) {
    GatedDeltaRuleArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.g = call.need("g");
    a.beta = call.need("beta");
    a.A_log = call.get("A_log");
    a.dt_bias = call.get("dt_bias");
    a.h0 = call.get("h0");
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    a.use_gate_in_kernel = call.flag("use_gate_in_kernel");
    a.use_beta_sigmoid_in_kernel = call.flag("use_beta_sigmoid_in_kernel");
    a.allow_neg_eigval = call.flag("allow_neg_eigval");
    set_common_args(a, call);
    return a;
}

TensorMap results(const GatedDeltaRuleFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const GatedDeltaRuleGrads& g) {
    return {{"dq", g.dq},
            {"dk", g.dk},
            {"dv", g.dv},
            {"dg", g.dg},
            {"dbeta", g.dbeta},
            {"dA_log", g.dA_log},
            {"ddt_bias", g.ddt_bias},
            {"dh0", g.dh0}};
}

void add_gated_delta_rule_cpu_rows(RowTable& table) {
    add_rows<GatedDeltaRuleArgs, GatedDeltaRuleFwd, GatedDeltaRuleGrads>(
        table, {"gated_delta_rule", "cpu", "cpu"}, gated_delta_rule_args, gated_delta_rule_contract,
        {{"chunk", gated_delta_rule_chunk_fwd_cpu, gated_delta_rule_chunk_bwd_cpu},
         {"recurrent", gated_delta_rule_recurrent_fwd_cpu, gated_delta_rule_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
