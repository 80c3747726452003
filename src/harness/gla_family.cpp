// src/harness/gla_family.cpp — gla declared: its tensors, reference and validation rules.
#include "harness/family_support.h"
#include "reference/gla.h"

namespace lav::harness {
namespace {

ref::GlaInputs reference_inputs(const Call& c) {
    ref::GlaInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, g, h0);
    set_common_inputs(r, c);
    return r;
}

TensorMap outputs(const ref::GlaOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::GlaInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::gla_fwd(r));
    if (backward) {
        const ref::GlaGrads g = ref::gla_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dg, dh0));
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const scenario::Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

}  // namespace

Family gla_family() {
    Family f;
    f.name = "gla";
    f.summary = "gated linear attention with a per-key-dimension decay: GLA, HGRN2";
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"g", Role::gate, "B T H K", DTypeSetting::gate, {"logsigmoid"}},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::gla_fwd_parallel(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
