// src/harness/rwkv6_family.cpp — rwkv6 declared: its tensors, reference and validation rules.
#include "harness/family_support.h"
#include "reference/rwkv6.h"

namespace lav::harness {
namespace {

ref::Rwkv6Inputs reference_inputs(const Call& c) {
    ref::Rwkv6Inputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, w, u, h0);
    set_common_inputs(r, c);
    return r;
}

TensorMap outputs(const ref::Rwkv6Outputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::Rwkv6Inputs r = reference_inputs(c);
    TensorMap out = outputs(ref::rwkv6_fwd(r));
    if (backward) {
        const ref::Rwkv6Grads g = ref::rwkv6_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dw, du, dh0));
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const scenario::Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

}  // namespace

Family rwkv6_family() {
    Family f;
    f.name = "rwkv6";
    f.summary =
        "RWKV-6: per-key-dimension decay w, bonus u on the current token; o reads the state "
        "before the step";
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"w", Role::gate, "B T H K", DTypeSetting::gate, {"logsigmoid"}},
        // the bonus is a parameter: per head and key dimension, no time axis
        {"u", Role::gate, "H K", DTypeSetting::gate},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::rwkv6_fwd_parallel(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
