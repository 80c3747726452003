// kernels/delta_rule/delta_rule_rows.cpp — delta_rule's CPU rows, and the argument and result
// mapping of its rows.
#include "kernels/common/rows.h"
#include "kernels/delta_rule/delta_rule.h"

namespace lav::kernels {

DeltaRuleArgs delta_rule_args(const Call& call) {
    DeltaRuleArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, beta, h0);
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    set_common_args(a, call);
    return a;
}

TensorMap results(const DeltaRuleFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const DeltaRuleGrads& g) { return LAV_NAMED(g, dq, dk, dv, dbeta, dh0); }

void add_delta_rule_cpu_rows(RowTable& table) {
    add_rows<DeltaRuleArgs, DeltaRuleFwd, DeltaRuleGrads>(
        table, {"delta_rule", "cpu", "cpu"}, delta_rule_args, delta_rule_contract,
        {{"chunk", delta_rule_chunk_fwd_cpu, delta_rule_chunk_bwd_cpu},
         {"recurrent", delta_rule_recurrent_fwd_cpu, delta_rule_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
