// src/harness/delta_rule_family.cpp — the delta rule declared: its tensors, options, reference.
#include "harness/family_support.h"
#include "reference/delta_rule.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;

ref::DeltaRuleInputs reference_inputs(const Call& c) {
    ref::DeltaRuleInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, beta, h0);
    set_common_inputs(r, c);
    r.use_qk_l2norm_in_kernel = c.flag("use_qk_l2norm_in_kernel");
    return r;
}

TensorMap outputs(const ref::DeltaRuleOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::DeltaRuleInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::delta_rule_fwd(r));
    if (backward) {
        const ref::DeltaRuleGrads g = ref::delta_rule_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dbeta, dh0));
    }
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_unnormalised_keys(issues, c);
    return issues;
}

}  // namespace

Family delta_rule_family() {
    Family f;
    f.name = "delta_rule";
    f.summary = "DeltaNet: linear attention with the delta-rule state correction";
    // FLA's default is false, but its tests always normalise q and k, and the family's default
    // randn keys need it to stay stable
    f.options = {{"use_qk_l2norm_in_kernel", {"true", "false"}}};
    f.tensors = {
        // randn keys are only stable once normalised, which use_qk_l2norm_in_kernel does
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        // β ~ U[0, 1) is a valid β as drawn
        {"beta", Role::gate, "B T H", DTypeSetting::gate, {"rand"}},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::delta_rule_fwd_wy(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
