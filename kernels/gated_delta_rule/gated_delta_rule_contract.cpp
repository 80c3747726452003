// kernels/gated_delta_rule/gated_delta_rule_contract.cpp — the precision contracts of the gated
// delta rule's chunk and recurrent variants. Declarations only: the items come from the shared
// engine's table in common/cpu/delta_chunk.h, and README.md says why each item has its dtype.
#include "common/cpu/delta_chunk.h"
#include "gated_delta_rule/gated_delta_rule.h"

namespace lav::kernels {

PrecisionContract gated_delta_rule_contract(std::string_view variant, bool backward,
                                            const GatedDeltaRuleArgs& args) {
    delta::Args e;
    e.family = "gated_delta_rule";
    e.q = args.q;
    e.g = args.g;
    e.beta = args.beta;
    e.A_log = args.A_log;
    e.dt_bias = args.dt_bias;
    e.h0 = args.h0;
    e.l2norm = args.use_qk_l2norm_in_kernel;
    e.gate_in_kernel = args.use_gate_in_kernel;
    e.beta_sigmoid = args.use_beta_sigmoid_in_kernel;
    e.allow_neg_eigval = args.allow_neg_eigval;
    e.state_dtype = args.state_dtype;
    e.output_dtype = args.output_dtype;
    return delta::contract(e, variant, backward);
}

}  // namespace lav::kernels
