// src/harness/simple_gla_family.cpp — simple_gla declared: its tensors, options and reference.
#include "harness/family_support.h"
#include "reference/simple_gla.h"

namespace lav::harness {
namespace {

ref::SimpleGlaInputs reference_inputs(const Call& c) {
    ref::SimpleGlaInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, g, g_gamma, h0);
    set_common_inputs(r, c);
    return r;
}

TensorMap outputs(const ref::SimpleGlaOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::SimpleGlaInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::simple_gla_fwd(r));
    if (backward) {
        const ref::SimpleGlaGrads g = ref::simple_gla_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dg, dh0));
    }
    return out;
}

}  // namespace

Family simple_gla_family() {
    Family f;
    f.name = "simple_gla";
    f.summary =
        "scalar-decay linear attention: linear attention, retention, lightning attention, "
        "Mamba-2 SSD";
    f.options = {{"gate", {"g", "g_gamma", "none"}}};
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"g", Role::gate, "B T H", DTypeSetting::gate, {"logsigmoid"}, "gate=g"},
        // a constant per-head decay is a parameter of the model, not differentiated here
        {"g_gamma", Role::gate, "H", DTypeSetting::gate, {"retention"}, "gate=g_gamma", false},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::simple_gla_fwd_parallel(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
