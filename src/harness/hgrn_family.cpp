// src/harness/hgrn_family.cpp — hgrn declared: its tensors, reference and validation rules.
#include <string>

#include "harness/family_support.h"
#include "reference/hgrn.h"

namespace lav::harness {
namespace {

ref::HgrnInputs reference_inputs(const Call& c) {
    ref::HgrnInputs r;
    LAV_TENSORS_FROM(r, c, x, g, h0);
    r.cu_seqlens = c.cu_seqlens;
    return r;
}

TensorMap outputs(const ref::HgrnOutputs& f) { return LAV_NAMED(f, o, ht); }

TensorMap reference(const Call& c, bool backward) {
    const ref::HgrnInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::hgrn_fwd(r));
    if (backward) {
        const ref::HgrnGrads g = ref::hgrn_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dx, dg, dh0));
    }
    return out;
}

// HGRN's width D is expressed as H heads of K channels, so a scenario's [shape] gives H and K,
// and V (which hgrn has no use for) must equal K
std::vector<scenario::FamilyIssue> check(const scenario::Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    if (c.V != c.K)
        issues.push_back({"shape.V",
                          "hgrn has one state per channel, so V must equal K = " +
                              std::to_string(c.K) + ", got " + std::to_string(c.V),
                          "set V = K; HGRN's width D is H·K"});
    check_one_value_head(issues, c);
    if (c.scale) issues.push_back({"scale", "hgrn has no scale: o_t = h_t", "leave 'scale' out"});
    return issues;
}

}  // namespace

Family hgrn_family() {
    Family f;
    f.name = "hgrn";
    f.summary = "HGRN's elementwise gated recurrence h = exp(g)*h + x, width D = H*K (V = K)";
    f.tensors = {
        {"x", Role::input, "B T H K", DTypeSetting::inputs},
        {"g", Role::gate, "B T H K", DTypeSetting::gate, {"logsigmoid"}},
        {"h0", Role::state, "N H K", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H K", DTypeSetting::output},
        {"ht", Role::output, "N H K", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H K", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K", DTypeSetting::state},
    };
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::hgrn_fwd_parallel(reference_inputs(c)));
    };
    return f;
}

}  // namespace lav::harness
