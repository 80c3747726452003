// src/harness/gsa_family.cpp — gsa declared: its tensors, slot option and reference.
#include "harness/family_support.h"
#include "reference/gsa.h"

namespace lav::harness {
namespace {

using scenario::Case;

ref::GsaInputs reference_inputs(const Call& c) {
    ref::GsaInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, s, g, hk0, hv0);
    set_common_inputs(r, c);
    return r;
}

TensorMap outputs(const ref::GsaOutputs& f) { return LAV_NAMED(f, o, hkt, hvt); }

TensorMap reference(const Call& c, bool backward) {
    const ref::GsaInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::gsa_fwd(r));
    if (backward) {
        const ref::GsaGrads g = ref::gsa_bwd(r, c.need("d_o"), c.need("dhkt"), c.need("dhvt"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, ds, dg, dhk0, dhv0));
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

}  // namespace

Family gsa_family() {
    Family f;
    f.name = "gsa";
    f.summary = "Gated Slot Attention: two gated passes over M memory slots with a softmax between";
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"s", Role::input, "B T H M", DTypeSetting::inputs},
        {"g", Role::gate, "B T H M", DTypeSetting::gate, {"logsigmoid"}},
        {"hk0", Role::state, "N H K M", DTypeSetting::state, {}, "initial_state"},
        {"hv0", Role::state, "N H M V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"hkt", Role::output, "N H K M", DTypeSetting::state},
        {"hvt", Role::output, "N H M V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dhkt", Role::cotangent, "N H K M", DTypeSetting::state},
        {"dhvt", Role::cotangent, "N H M V", DTypeSetting::state},
    };
    f.state_components = {{"hk", {"hk0", "hkt", "dhkt"}}, {"hv", {"hv0", "hvt", "dhvt"}}};
    // M, the number of memory slots: FLA's GSA tests use 32, 64 and 128; 64 is the layer default
    f.options = {{"slots", {"64", "16", "32", "128", "256"}}};
    f.dim_options = {{"M", "slots"}};
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::gsa_fwd_parallel(reference_inputs(c)));
    };
    return f;
}

}  // namespace lav::harness
