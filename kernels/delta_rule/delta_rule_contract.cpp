// kernels/delta_rule/delta_rule_contract.cpp — the precision contracts of the delta rule's chunk
// and recurrent variants. Declarations only: the items come from the shared engine's table in
// common/cpu/delta_chunk.h, and README.md says why each item has its dtype.
#include "common/cpu/delta_chunk.h"
#include "delta_rule/delta_rule.h"

namespace lav::kernels {

PrecisionContract delta_rule_contract(std::string_view variant, bool backward,
                                      const DeltaRuleArgs& args) {
    delta::Args e;
    e.family = "delta_rule";
    e.q = args.q;
    e.beta = args.beta;
    e.h0 = args.h0;
    e.l2norm = args.use_qk_l2norm_in_kernel;
    e.state_dtype = args.state_dtype;
    e.output_dtype = args.output_dtype;
    return delta::contract(e, variant, backward);
}

}  // namespace lav::kernels
